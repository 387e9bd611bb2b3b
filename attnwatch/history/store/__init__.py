"""The store: DuckDB files and DuckLake lakes, the schema as numbered migrations, transactions,
faults, recovery, copying and maintenance."""
