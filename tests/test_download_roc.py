"""The client's download check as a detector (issue 48): what each check sees of each crafted download."""
from __future__ import annotations

import pytest

from privbench.download_roc import SCORES, collect, main, points, table


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
    for family in ("trap_partial", "trap_behind_pca", "quiet (trap_partial)", "quiet (trap_behind_pca)",
                   "disguised_trap", "quiet (disguised_trap)", "disguised_trap, few rows"):
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
    assert lines["trap_behind_pca"].split(" | ")[10] == "1.000"  # AUROC off_centre
    assert lines["quiet (trap_behind_pca)"].split(" | ")[11] == "1.000"  # AUROC dead_rows


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


def test_each_crafted_download_is_read_by_its_server_and_a_quiet_or_honest_one_reads_nothing(rows):
    """Every crafted family reads some of the victim's 8 images from its one-step gradient; quiet downloads and
    honest ones carry nothing of the victim; the table's accepted column is their mean, the shipped check's column 0
    for the families it flags."""
    for family in ("trap_weights", "trap_partial", "trap_behind_pca", "imprint", "disguised_trap"):
        assert _rate(rows, family, "recovered") > 0.1, family
    assert all(r["recovered"] == 0.0 for r in rows if r["family"] == "honest" or r["family"].startswith("quiet"))
    lines = {line.split(" | ")[0].removeprefix("| "): line.split(" | ") for line in table(rows).splitlines()[2:]}
    assert lines["imprint"][4] == f"{_rate(rows, 'imprint', 'recovered'):.3f}" and lines["imprint"][5] == "0.000"


def test_rare_units_catch_the_disguised_trap_of_every_row_and_few_rows_pass_every_score(rows):
    """The disguised trap keeps the first layer at one half and its biases in range; trapping every second-layer
    row leaves it rare (rare_units near 1), 10 rows at 6 % do not: on fresh initialisations (no round before, so
    no drift) the cautious client lets that one through and its server reads what it reads."""
    by = {f: [r for r in rows if r["family"] == f] for f in {r["family"] for r in rows}}
    assert all(r["off_centre"] < 0.01 and r["dead_rows"] == 0.0 for r in by["disguised_trap"])
    assert all(r["rare_units"] > 0.9 for r in by["disguised_trap"])
    assert max(r["rare_units"] for r in by["disguised_trap, few rows"]) < 2 * max(r["rare_units"]
                                                                                for r in by["honest"])
    lines = {line.split(" | ")[0].removeprefix("| "): line.split(" | ") for line in table(rows).splitlines()[2:]}
    assert lines["disguised_trap"][3] == "1.00" and lines["disguised_trap, few rows"][3] == "0.00"
    assert lines["disguised_trap, few rows"][6] == f"{_rate(rows, 'disguised_trap, few rows', 'recovered'):.3f}"


def test_the_operating_points_give_each_margins_false_positives_and_what_still_passes():
    """Hand-made rows: honest off-centre 0.1 in seeds 1 and 2, a crafted download at 0.25 reading 0.5 in each. At
    1x and 2x (thresholds 0.1, 0.2) the crafted ones are flagged and read nothing; at 3x (0.3) they pass and read
    0.5; no honest row is flagged at any margin (0.1 is not above 1 x 0.1)."""
    def row(seed, family, off_centre, read):
        return {"seed": seed, "family": family, "source": "hand", "shipped": 0.0, "recovered": read,
                **{s: 0.0 for s in SCORES}, "off_centre": off_centre}

    rows = [row(1, "honest", 0.1, 0.0), row(2, "honest", 0.1, 0.0), row(1, "crafted", 0.25, 0.5),
            row(2, "crafted", 0.25, 0.5), row(1, "quiet (crafted)", 0.25, 0.0)]
    cells = {line.split(" | ")[0].removeprefix("| "): line.rstrip(" |").split(" | ")[1:]
             for line in points(rows, (1.0, 2.0, 3.0)).splitlines()[2:]}
    assert cells == {"1": ["0.000", "0.000"], "2": ["0.000", "0.000"], "3": ["0.000", "0.500"]}
