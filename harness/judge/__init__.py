"""Stage 4, judge: evaluate a candidate against its reference (reference.py, candidate.py), compare
outputs, apply the integrity rules, and decide the verdict (verdicts.py, the one place a status is
given) and its diagnosis."""
