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


def test_drift_reads_only_downloads_with_a_round_before(rows):
    """Fresh initialisations have no round before: drift 0 for honest and crafted alike, and no AUROC for it."""
    assert all(r["previous"] == 0.0 and r["drift"] == 0.0 for r in rows)
    lines = {line.split(" | ")[0].removeprefix("| "): line for line in table(rows).splitlines()[2:]}
    assert lines["trap_weights"].rstrip(" |").split(" | ")[-1] == "-"


def test_one_seed_cannot_be_held_out(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path), "--seeds", "0"])
    assert "at least two seeds" in capsys.readouterr().err


def test_a_held_out_seeds_own_downloads_never_set_its_thresholds():
    """Hand-made rows: seed 0 holds an honest outlier (off-centre 0.3) that seeds 1 and 2 never reach (0.05). Held
    out, it is flagged (threshold 2 x 0.05 from the other seeds); the crafted rows of seeds 1 and 2 at 0.5 stay
    unflagged, because seed 0's outlier sets their thresholds at 0.6."""
    from privbench.download_roc import SCORES

    def row(seed, family, off_centre):
        return {"seed": seed, "family": family, "source": "hand", "shipped": 0.0,
                **{s: 0.0 for s in SCORES}, "off_centre": off_centre}

    rows = [row(0, "honest", 0.3), row(0, "honest", 0.01), row(1, "honest", 0.05), row(2, "honest", 0.04),
            row(1, "crafted", 0.5), row(2, "crafted", 0.5)]
    lines = {line.split(" | ")[0].removeprefix("| "): line.split(" | ") for line in table(rows).splitlines()[2:]}
    assert lines["honest"][3] == "0.25"  # 1 of 4 honest rows flagged: seed 0's outlier, held out
    assert lines["crafted"][3] == "0.00"
    with pytest.raises(ValueError, match="at least two seeds"):
        table([row(0, "honest", 0.1), row(0, "crafted", 0.5)])
