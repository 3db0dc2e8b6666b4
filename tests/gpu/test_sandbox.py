"""The sandbox on a GPU: the same attackers as tests/e2e/test_sandbox.py, beside honest candidates
and a CUDA extension, in a CUDA run (workers that see the GPU keep the host's PID namespace)."""

import pytest

from tests.e2e.test_sandbox import (hostile_run, test_every_attack_gets_a_verdict_with_a_one_line_reason,  # noqa: F401
                                    test_forged_build_outcomes_change_no_later_run,
                                    test_no_process_of_the_run_is_left,
                                    test_no_worker_limits_starves_or_reprioritises_the_harness_or_the_reference_nor_sends_a_datagram,
                                    test_no_secret_leaves_the_parent_and_no_connection_is_made,
                                    test_nothing_outside_the_scratch_dirs_changed,
                                    test_resource_bombs_are_stopped_with_the_limit_named,
                                    test_signals_cannot_reach_the_harness_or_the_reference,
                                    test_the_results_are_the_harness_own,
                                    test_the_run_completes_and_says_which_protections_were_active)

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    yield from hostile_run(tmp_path_factory.mktemp("hostile_gpu"), "cuda")
