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
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    model_validator,
)

from flowctl_core.errors import ConfigurationError, closest_name, yaml_problem
from flowctl_core.yaml_files import UniqueKeyLoader, utf8_problem

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONF = PROJECT_ROOT / "conf" / "pipeline.yaml"
CONF_ENV_VAR = "FLOWCTL_CONF"


@dataclass(frozen=True)
class PipelineConf:
    """The pipeline conf as the jobs read it, made by :func:`load_conf` only: the defaults are
    the sections' below (one place), so its fields have none."""

    source: Path
    spark_master: str | None
    app_name: str
    spark_settings: dict[str, str]
    resolve_delta_jars: bool
    raw_dir: str
    warehouse_dir: str
    quality_dir: str
    validate_with_great_expectations: bool
    #: Rows of raw files quarantined whole (schema or name) read into the quarantine per run; the
    #: driver holds them until the write (~400 bytes a row), so past this a file keeps its record.
    max_rows_from_files_quarantined_whole: int
    #: A span of events the episodes and daily_metrics jobs recompute is read once and kept in
    #: memory for their writes when its files are local and hold at most this many bytes.
    span_in_memory_max_bytes: int
    #: The episodes job finds queue segments by sorting a span's queue events when its files are
    #: local and hold at most this many bytes, else by a lookup that does not sort them.
    sort_queue_segments_max_bytes: int
    #: A job submits its independent Spark jobs (episodes' and daily_metrics' table writes,
    #: recommend's days) from this many driver threads at once (jobs/concurrent_jobs.py); 1 runs
    #: them in turn.
    concurrent_jobs: int
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        # A folder named on a command line is relative to where the command runs (the conf
        # file's are resolved against the project root as it is read, _resolve): Spark would
        # read a relative Delta location as a table name.
        for name in ("raw_dir", "warehouse_dir", "quality_dir"):
            value = getattr(self, name)
            if "://" not in value and not os.path.isabs(value):
                object.__setattr__(self, name, os.path.abspath(value))

    def table_path(self, layer: str, table: str) -> str:
        return f"{self.warehouse_dir}/{layer}/{table}"


def _resolve(path: str) -> str:
    """Absolute local path, or a URI (s3a://, hdfs://, file://) left untouched."""
    if "://" in path:
        return path
    candidate = Path(path)
    return str(candidate if candidate.is_absolute() else PROJECT_ROOT / candidate)


class ConfError(ConfigurationError):
    """A pipeline conf that cannot be read: the message names the file."""


def read_yaml(source: Path, what: str, option: str) -> Any:
    """The YAML document of ``source`` (None when empty); a file that cannot be read or parsed
    raises :class:`ConfError` naming ``what`` it is, the file, and the ``option`` that names it."""
    try:
        # Decoded whole, so that a bad byte's offset is the file's, not a read buffer's.
        text = source.read_bytes().decode("utf-8")
        return yaml.load(text, Loader=UniqueKeyLoader)  # a SafeLoader: no objects built
    except UnicodeDecodeError as error:
        raise ConfError(f"{what} {source}: {utf8_problem(error)} ({option})") from None
    except OSError as error:
        raise ConfError(f"{what} {source}: {error.strerror or error} ({option})") from None
    except yaml.YAMLError as error:
        raise ConfError(f"{what} {source} is not valid YAML: {yaml_problem(error)}") from None


ScalarSetting = StrictStr | StrictBool | StrictInt | StrictFloat


class _Section(BaseModel):
    # A key the pipeline does not read is an error: silently ignored, it is a lost setting.
    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _empty_is_defaults(cls, value: Any) -> Any:
        # A section whose keys are all commented out is YAML null: it means "the defaults".
        return {} if value is None else value


class SparkSection(_Section):
    master: StrictStr | None = None  # None: left to spark-submit
    app_name: StrictStr = "flowctl"
    conf: dict[str, ScalarSetting] = Field(default_factory=dict)
    concurrent_jobs: StrictInt = Field(2, ge=1)


class DeltaSection(_Section):
    resolve_jars: StrictBool = True


class PathsSection(_Section):
    raw: StrictStr = "var/raw"
    warehouse: StrictStr = "var/warehouse"
    quality: StrictStr = "var/quality"


class IngestSection(_Section):
    validate_with_great_expectations: StrictBool = True
    max_rows_from_files_quarantined_whole: StrictInt = Field(2_000_000, ge=0)


class SpanSection(_Section):
    keep_in_memory_max_mb: StrictInt = Field(4, ge=0)
    sort_queue_segments_max_mb: StrictInt = Field(40, ge=0)


class PipelineSections(_Section):
    spark: SparkSection = Field(default_factory=SparkSection)
    delta: DeltaSection = Field(default_factory=DeltaSection)
    paths: PathsSection = Field(default_factory=PathsSection)
    ingest: IngestSection = Field(default_factory=IngestSection)
    span: SpanSection = Field(default_factory=SpanSection)


def _known_keys(model: type[BaseModel], location: tuple[Any, ...]) -> list[str]:
    """The keys allowed where an unknown key ``location`` was found."""
    for part in location[:-1]:
        annotation = model.model_fields[str(part)].annotation
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return []
        model = annotation
    return list(model.model_fields)


#: The members of :data:`ScalarSetting` as pydantic names them in an error's location.
_SCALAR_TAGS = {"str", "bool", "int", "float"}


def _problems(error: ValidationError) -> list[str]:
    """One phrase per problem, each naming its key as a dotted path (``paths.raw``)."""
    problems: dict[str, str] = {}
    for item in error.errors():
        location = item["loc"]
        if location and location[-1] in _SCALAR_TAGS:  # one Spark setting failed every member
            location = location[:-1]
            expected = "a string, number or boolean"
        elif item["type"] in ("model_type", "dict_type"):
            expected = "a mapping of settings"
        else:
            expected = item["msg"].removeprefix("Input should be ")
        key = ".".join(str(part) for part in location) or "(top level)"
        if item["type"] == "extra_forbidden":
            known = _known_keys(PipelineSections, location)
            close = closest_name(str(location[-1]), known)
            hint = f"did you mean {close!r}? " if close else ""
            problems[key] = f"{key}: unknown key ({hint}known: {', '.join(known)})"
        else:
            problems.setdefault(key, f"{key}: should be {expected}, got {item['input']!r}")
    return list(problems.values())


def load_conf(conf_path: str | os.PathLike[str] | None = None) -> PipelineConf:
    """Read and check the pipeline conf; :class:`ConfError` names the file and every key that is
    unknown or of the wrong type (a quoted "false" is not a boolean)."""
    source = Path(conf_path or os.environ.get(CONF_ENV_VAR) or DEFAULT_CONF)
    raw = read_yaml(source, "pipeline conf", f"--conf or ${CONF_ENV_VAR}")
    if raw is None:
        # Empty (or truncated to nothing): every default, no master and no driver memory among
        # them, is not what anyone meant to run.
        raise ConfError(f"pipeline conf {source} is empty: expected a mapping of sections")
    if not isinstance(raw, dict):
        raise ConfError(f"pipeline conf {source}: expected a mapping of sections, got {raw!r}")
    try:
        sections = PipelineSections.model_validate(raw)
    except ValidationError as error:
        raise ConfError(f"pipeline conf {source}: " + "; ".join(_problems(error))) from None
    spark, paths = sections.spark, sections.paths
    # YAML booleans and numbers become Spark's string settings ("true", "4").
    settings = {
        key: str(value).lower() if isinstance(value, bool) else str(value)
        for key, value in spark.conf.items()
    }
    return PipelineConf(
        source=source.resolve(),
        spark_master=spark.master,
        app_name=spark.app_name,
        spark_settings=settings,
        resolve_delta_jars=sections.delta.resolve_jars,
        raw_dir=_resolve(paths.raw),
        warehouse_dir=_resolve(paths.warehouse),
        quality_dir=_resolve(paths.quality),
        validate_with_great_expectations=sections.ingest.validate_with_great_expectations,
        max_rows_from_files_quarantined_whole=(
            sections.ingest.max_rows_from_files_quarantined_whole
        ),
        span_in_memory_max_bytes=sections.span.keep_in_memory_max_mb * 1024 * 1024,
        sort_queue_segments_max_bytes=sections.span.sort_queue_segments_max_mb * 1024 * 1024,
        concurrent_jobs=spark.concurrent_jobs,
        raw=raw,
    )
