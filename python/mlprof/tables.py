"""The tables of `mlprof export --format parquet` (docs/parquet.md) in
DuckDB. Pure Python: duckdb is imported only when asked for."""
import os

# The tables of an export, each a view of to_duckdb's connection.
TABLES = ("spans", "zones", "steps", "samples", "collectives", "findings",
          "memory_sites", "allocations", "stack_samples", "stacks")


def to_duckdb(path, connection=None):
    """A DuckDB connection with one view per table of the export in directory
    `path` (what `mlprof export --format parquet RUN -o path` wrote): spans
    (every spans/part-*.parquet), zones, steps, samples, collectives,
    findings, memory_sites, allocations, stack_samples, stacks (the last
    four only when the export has them: mlprof before them did not write
    them). `connection`: an open duckdb connection to add the views to
    (default: a new in-memory one). Raises FileNotFoundError when path holds
    no export, ImportError when duckdb is not installed."""
    import duckdb

    root = os.path.abspath(path)
    if not os.path.isfile(os.path.join(root, "zones.parquet")):
        raise FileNotFoundError(
            f"{path}: no mlprof export here (no zones.parquet; make one "
            f"with: mlprof export --format parquet RUN -o {path})")
    con = connection if connection is not None else duckdb.connect()
    for table in TABLES:
        where = (os.path.join(root, "spans", "*.parquet") if table == "spans"
                 else os.path.join(root, table + ".parquet"))
        if table != "spans" and not os.path.isfile(where):
            continue
        quoted = where.replace("'", "''")
        con.execute(f'create or replace view "{table}" as select * from '
                    f"read_parquet('{quoted}')")
    return con
