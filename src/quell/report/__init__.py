"""Results for people and machines: phase summaries, terminal tables, PNG plots, HTML."""
