"""A results store that fails mid-run: nothing measured is lost, the run is never stored as finished."""

import json
import sqlite3

import pytest
import torch

import kernelkit as kk
from kernelkit.store import Store, StoreError

pytestmark = pytest.mark.slow


class FailingStore(Store):
    """A store whose disk fills up after ``ok`` results."""

    ok = 1

    def add_result(self, run_id, result):
        if self.ok <= 0:
            with self._guard("saving a result"):
                raise sqlite3.OperationalError("database or disk is full")
        self.ok -= 1
        super().add_result(run_id, result)


def test_a_store_that_fails_mid_run_keeps_every_result(fresh_cache, tmp_path):
    path = tmp_path / "results.sqlite"
    Store.open(path).close()
    store = FailingStore(path, sqlite3.connect(str(path), isolation_level=None))
    report = kk.bench_op("square", impls=["eager"], sizes=[(16, 16), (8, 8)], dtypes=[torch.float32],
                         device="cpu", budget=0.05, store=store)
    assert report.store_error and "disk" in report.store_error and "full" in report.store_error
    assert not report.ok
    assert report.recovery is not None and report.recovery.is_file()
    saved = json.loads(report.recovery.read_text())["results"]
    assert {r["impl"] for r in saved} == {r.impl for r in report.results} and len(saved) == len(report.results) >= 2
    with Store.open(path) as db:
        run = db.run(report.run_id)
        assert run.status == "incomplete" and run.n_results == 1


def test_reading_commands_never_create_a_store(tmp_path):
    missing = tmp_path / "typo" / "results.sqlite"
    with pytest.raises(StoreError, match="no such file"):
        Store.open(missing, create=False)
    assert not missing.parent.exists()


def test_a_run_id_too_large_for_sqlite_is_a_clear_error(tmp_path):
    with Store.open(tmp_path / "r.sqlite") as db, pytest.raises(StoreError, match="is not a run"):
        db.resolve_run("99999999999999999999999")
