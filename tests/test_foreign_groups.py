"""Other tools' runs grouped as a lineage shows them: by job, the jobs of a parent job under it however
deep (an Airflow DAG, its task, the Spark application the task ran, its actions), counted by state."""

from __future__ import annotations

import uuid

from governance.foreign.groups import JobGroup, ParentGroup, duration, grouped
from governance.foreign.nodes import ForeignRunNode


def run(
    job: str, parent: ForeignRunNode | str | None = None, *, state: str = "COMPLETE", at: str = "10:00"
) -> ForeignRunNode:
    """A run of `job` started at `at`, whose parent facet names `parent` (a run, or a job whose run reported nothing)."""
    parent_run = parent.run_id if isinstance(parent, ForeignRunNode) else str(uuid.uuid4()) if parent else None
    parent_job = parent.job if isinstance(parent, ForeignRunNode) else f"airflow://s/{parent}" if parent else None
    return ForeignRunNode(
        run_id=str(uuid.uuid4()),
        job_namespace="airflow://s",
        job_name=job,
        state=state,
        started_at=f"2026-12-02T{at}:00Z",
        user=None,
        producer="p",
        reporter="lineage-bot",
        depth=0,
        ended_at=f"2026-12-02T{at}:03Z",
        parent_run_id=parent_run,
        parent_job=parent_job,
    )


def shape(groups: list[JobGroup | ParentGroup]) -> list:
    return [
        (group.job, len(group.runs))
        if isinstance(group, JobGroup)
        else (group.job, group.own is not None, shape(group.jobs))
        for group in groups
    ]


def test_a_dag_its_task_the_spark_application_it_ran_and_its_action_nest_each_under_its_parent():
    task = run("reports.load", "reports", at="10:00")
    application = run("load_app", task, at="10:01")
    action = run("load_app.write", application, at="10:02")
    alone = run("adhoc", at="09:00")

    found = grouped([action, application, task, alone])

    assert shape(found) == [
        ("airflow://s/adhoc", 1),
        (
            "airflow://s/reports",
            False,
            [("airflow://s/reports.load", True, [("airflow://s/load_app", True, [("airflow://s/load_app.write", 1)])])],
        ),
    ]


def test_a_job_s_runs_are_counted_by_state_with_its_last_run_and_last_failure():
    runs = [run("nightly", at=f"10:0{i}", state="FAIL" if i == 1 else "COMPLETE") for i in range(4)]

    [job] = grouped(runs)

    assert isinstance(job, JobGroup)
    assert (job.states, job.last.run_id, job.last_failure.run_id if job.last_failure else None) == (
        [("COMPLETE", 3), ("FAIL", 1)],
        runs[-1].run_id,
        runs[1].run_id,
    )


def test_jobs_naming_each_other_as_parents_stand_side_by_side():
    first = run("one")
    second = run("two", first)
    first.parent_run_id, first.parent_job = second.run_id, second.job

    assert {group.job for group in grouped([first, second])} == {"airflow://s/one", "airflow://s/two"}


def test_a_run_that_ended_before_it_started_by_its_clocks_has_no_duration():
    backwards = run("skewed")
    backwards.ended_at = "2026-12-02T09:59:00Z"

    assert duration(backwards) is None and duration(run("fine")) == "3.0 s"
