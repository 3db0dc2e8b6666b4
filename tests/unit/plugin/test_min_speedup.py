"""The pytest plugin's speed bar: a correct candidate slower than --harness-min-speedup fails."""

from harness.pytest_plugin import too_slow


def test_a_correct_candidate_below_the_bar_fails_and_says_how_slow():
    assert too_slow(0.1, 1.0) == "ok, but 0.1x the reference's speed, below --harness-min-speedup 1"
    assert too_slow(1.2, 1.0) is None and too_slow(1.0, 1.0) is None
    assert too_slow(0.1, None) is None  # no bar: correct passes, as before
