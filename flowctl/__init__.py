"""What joins the engine and the pipeline (DESIGN §1: ``schemas/`` <- ``flowctl_core/`` <-
``jobs/`` <- here): the ``flowctl`` command and what-if over the Delta tables. The engine
(``flowctl_core``) imports neither this package, ``jobs`` nor pyspark."""
