"""The client's download check as a detector (issue 48): what each check sees of each crafted download."""
from __future__ import annotations

import pytest

from privbench.download_roc import collect, main, table


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    return collect([0, 1], rounds=0, inits=1, work=tmp_path_factory.mktemp("roc"))


def _rate(rows, family, key):
    mine = [r for r in rows if r["family"] == family]
    return sum(r[key] for r in mine) / len(mine)


def test_the_shipped_check_misses_the_adaptive_servers_and_their_quiet_downloads(rows):
    """Fresh initialisations pass; first-layer traps and the imprint block are flagged; half-trapped rows, the PCA
    trap and the quiet downloads of model inconsistency all pass the shipped check."""
    assert _rate(rows, "honest", "shipped") == 0.0
    assert _rate(rows, "trap_weights", "shipped") == 1.0 and _rate(rows, "imprint", "shipped") == 1.0
    for family in ("trap_partial", "trap_behind_pca", "quiet (trap_partial)", "quiet (trap_behind_pca)"):
        assert _rate(rows, family, "shipped") == 0.0, family


def test_each_new_score_sees_what_its_construction_leaves(rows):
    """The PCA trap's first layer fires on every input (off-centre 1/2, honest inits near 0), a quiet download has
    all-zero rows (a share of them: half the first layer, or the second layer's every row), the imprint adds
    tensors; the table's AUROCs say the same."""
    by = {f: [r for r in rows if r["family"] == f] for f in {r["family"] for r in rows}}
    assert all(r["off_centre"] == 0.5 for r in by["trap_behind_pca"])
    assert max(r["off_centre"] for r in by["honest"]) < 0.15
    assert all(r["dead_rows"] == 0.5 for r in by["quiet (trap_partial)"])
    assert all(r["dead_rows"] == 1.0 for r in by["quiet (trap_behind_pca)"])
    assert all(r["dead_rows"] == 0.0 for r in by["honest"]) and all(r["architecture"] == 1.0 for r in by["imprint"])
    lines = {line.split(" | ")[0].removeprefix("| "): line for line in table(rows).splitlines()[2:]}
    assert lines["trap_behind_pca"].split(" | ")[7] == "1.000"  # AUROC off_centre
    assert lines["quiet (trap_behind_pca)"].split(" | ")[8] == "1.000"  # AUROC dead_rows


def test_one_seed_cannot_be_held_out(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path), "--seeds", "0"])
    assert "at least two seeds" in capsys.readouterr().err
