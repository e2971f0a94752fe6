"""Pure DataFrame -> DataFrame transforms of the pipeline: no I/O, no configuration, no actions."""
