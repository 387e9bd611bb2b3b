"""The Streamlit dashboard: reads the DuckDB history (through `history`) and nothing else."""
