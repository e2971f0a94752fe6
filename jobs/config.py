"""Pipeline configuration: one YAML file (conf/pipeline.yaml by default), paths made absolute.

The file is chosen by, in order: an explicit path (``--conf``), the ``FLOWCTL_CONF`` environment
variable, then ``conf/pipeline.yaml`` of the project. Relative paths inside it are resolved against
the project root, never the working directory, so jobs behave the same wherever they are started.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONF = PROJECT_ROOT / "conf" / "pipeline.yaml"
CONF_ENV_VAR = "FLOWCTL_CONF"


@dataclass(frozen=True)
class PipelineConf:
    source: Path
    spark_master: str | None
    app_name: str
    spark_settings: dict[str, str]
    resolve_delta_jars: bool
    raw_dir: str
    warehouse_dir: str
    quality_dir: str
    validate_with_great_expectations: bool
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def table_path(self, layer: str, table: str) -> str:
        return f"{self.warehouse_dir}/{layer}/{table}"


def _resolve(path: str) -> str:
    """Absolute local path, or a URI (s3a://, hdfs://, file://) left untouched."""
    if "://" in path:
        return path
    candidate = Path(path)
    return str(candidate if candidate.is_absolute() else PROJECT_ROOT / candidate)


class ConfError(ValueError):
    """A pipeline conf that cannot be read: the message names the file."""


def read_yaml(source: Path, what: str, option: str) -> Any:
    """The YAML document of ``source`` (None when empty); a file that cannot be read or parsed
    raises :class:`ConfError` naming ``what`` it is, the file, and the ``option`` that names it."""
    try:
        with open(source, encoding="utf-8") as handle:
            return yaml.safe_load(handle)
    except OSError as error:
        raise ConfError(f"{what} {source}: {error.strerror or error} ({option})") from None
    except yaml.YAMLError as error:
        raise ConfError(f"{what} {source} is not valid YAML: {error}") from None


def load_conf(conf_path: str | os.PathLike[str] | None = None) -> PipelineConf:
    source = Path(conf_path or os.environ.get(CONF_ENV_VAR) or DEFAULT_CONF)
    raw = read_yaml(source, "pipeline conf", f"--conf or ${CONF_ENV_VAR}") or {}
    if not isinstance(raw, dict):
        raise ConfError(f"pipeline conf {source}: expected a mapping of sections, got {raw!r}")
    spark = raw.get("spark", {})
    paths = raw.get("paths", {})
    ingest = raw.get("ingest", {})
    # YAML booleans and numbers become Spark's string settings ("true", "4").
    settings = {
        key: str(value).lower() if isinstance(value, bool) else str(value)
        for key, value in (spark.get("conf") or {}).items()
    }
    return PipelineConf(
        source=source.resolve(),
        spark_master=spark.get("master"),
        app_name=spark.get("app_name", "flowctl"),
        spark_settings=settings,
        resolve_delta_jars=bool(raw.get("delta", {}).get("resolve_jars", True)),
        raw_dir=_resolve(paths.get("raw", "var/raw")),
        warehouse_dir=_resolve(paths.get("warehouse", "var/warehouse")),
        quality_dir=_resolve(paths.get("quality", "var/quality")),
        validate_with_great_expectations=bool(ingest.get("validate_with_great_expectations", True)),
        raw=raw,
    )
