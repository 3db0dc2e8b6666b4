"""Stage 8, present: what people read. The terminal summary, the report site, run comparisons and exports."""
