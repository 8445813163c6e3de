"""A sweep on a real two-node Ray cluster (`ray.cluster_utils.Cluster`), stored in an S3 bucket
(moto's server), its worker node killed mid-sweep; the command line run as a user runs it.

One cluster and one sweep serve every test here (the whole scenario is ~1 minute)."""

import pytest

from tests.two_node_sweep import BUCKET, PREFIX, SWEEP, TwoNodeSweep, run_two_node_sweep

pytestmark = pytest.mark.e2e

CONFIGURATIONS = 4


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> TwoNodeSweep:
    result = run_two_node_sweep(tmp_path_factory.mktemp("two-nodes"))
    assert result.exit_code == 0, result.output[-5000:]
    return result


def test_trials_ran_on_both_nodes_and_every_result_is_in_one_store(sweep: TwoNodeSweep) -> None:
    nodes_seen = {r.node for r in [*sweep.at_kill.values(), *sweep.runs.values()]}
    assert {sweep.head, sweep.worker} <= nodes_seen
    assert all(r.host for r in sweep.runs.values())
    assert len(sweep.runs) == CONFIGURATIONS
    assert all(r.status == "FINISHED" for r in sweep.runs.values())


def test_the_teacher_was_generated_once_for_both_nodes(sweep: TwoNodeSweep) -> None:
    assert "teacher generations: 1" in sweep.output
    entries = {key.split("/")[1] for key in sweep.stored if key.startswith("teacher/")}
    assert len(entries) == 3  # the training, validation and test seeds
    for entry in entries:
        assert f"teacher/{entry}/manifest.json" in sweep.stored


def test_a_lost_node_s_trials_finish_on_the_other_node_without_refits(sweep: TwoNodeSweep) -> None:
    assert sweep.lost()
    every = SWEEP["fit"]["checkpoint_every"]
    for run_id in sweep.lost():  # retried in the same run, on the head node
        assert sweep.runs[run_id].status == "FINISHED"
        assert sweep.runs[run_id].node == sweep.head
        if "dyweight" in sweep.runs[run_id].name:  # from the state it published, not from 0
            assert sweep.runs[run_id].resumed_from >= every
    assert any(r.status == "FINISHED" for r in sweep.at_kill.values())
    assert sweep.rerun() == []  # nothing finished before the kill was run again
    assert sweep.duplicates == 0


def test_the_bucket_holds_the_sweep_and_no_local_folder_does(sweep: TwoNodeSweep) -> None:
    learned = next(e for e in SWEEP["solvers"] if e["name"] == "dyweight")["nfe"]
    fitted = [key for key in sweep.stored if key.startswith("fitted/")]
    assert len(fitted) == len(learned)
    assert any(key.startswith("tune/experiment_state") for key in sweep.stored)
    assert not [key for key in sweep.stored if key.endswith(".state.pt")]  # fits ended: removed
    assert {"summary.json", "sweep.yaml"} <= set(sweep.stored)
    assert sweep.local_storage == [], f"written outside s3://{BUCKET}/{PREFIX}"


def test_gpu_shares_are_refused_where_ray_reports_no_gpu(sweep: TwoNodeSweep) -> None:
    worker, evaluator = sweep.gpu_refusals
    assert "0.25 GPUs per trial (1 workers × worker_gpu 0.25) but the cluster has 0" in worker
    assert "the sweep's 2 evaluator(s) × 0.1 CPU + 0.5 GPU need 1 GPUs but the cluster has 0" in (
        evaluator
    )
    for refusal in sweep.gpu_refusals:
        assert refusal.startswith("resources: a trial cannot be placed: ") and "\n" not in refusal
