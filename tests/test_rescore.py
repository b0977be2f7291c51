"""``python -m privbench.rescore``: a finished run recounted at another bar from its matched pairs, by hand."""
from __future__ import annotations

import io
import json

import numpy as np
import pytest

from privbench.audit.output import write_metrics
from privbench.audit.summary import summary
from privbench.errors import ConfigError
from privbench.metrics.reconstruction import Recovered
from privbench.rescore import main, rescore


def _metrics(*, chance_pairs: bool = True) -> dict:
    """Four true images rebuilt at 30, 22, 18 and 10 dB (SSIM 0.9, 0.7, 0.5, 0.1), scored at the default bar; two
    chance baselines at 12, 11, 9, 8 dB and 6 dB everywhere."""
    pairs = [{"recon": i, "truth": i, "psnr": p, "ssim": s, "label_ok": True}
             for i, (p, s) in enumerate(zip((30.0, 22.0, 18.0, 10.0), (0.9, 0.7, 0.5, 0.1)))]
    baselines = {"mean_image": [12.0, 11.0, 9.0, 8.0], "non_member": [6.0] * 4}
    chance = {name: {"psnr_mean": float(np.mean(p)), "recovered_fraction": 0.0,
                     **({"matched": [{"psnr": x, "ssim": 0.2} for x in p]} if chance_pairs else {})}
              for name, p in baselines.items()}
    return {"run": {"name": "attack-file", "source": "g.pt", "payload": "gradient", "attack": "idlg", "seed": 0,
                    "num_images": 4, "inputs": "normalised"},
            "privacy": {"num_reconstructed": 4, "num_true": 4, "psnr_mean": 20.0, "psnr_chance": 10.0,
                        "psnr_gain": 10.0, "matched": pairs, "chance": chance, "recovered_fraction": 0.5,
                        "recovered_fraction_chance": 0.0, "recovered_bar": {"psnr": 20.0, "ssim": 0.0}},
            "threat_model": {}}


@pytest.mark.parametrize("bar, attack, chance", [
    (Recovered(20.0, 0.0), 0.5, 0.0),   # 30 and 22 dB
    (Recovered(25.0, 0.8), 0.25, 0.0),  # 30 dB at SSIM 0.9 only
    (Recovered(21.0, 0.8), 0.25, 0.0),  # 22 dB fails on its SSIM 0.7
    (Recovered(10.0, 0.0), 1.0, 0.5),   # all four; the mean image's 12 and 11 dB
])
def test_recounts_the_attack_and_every_chance_baseline_by_hand(bar, attack, chance):
    before = _metrics()
    after = rescore(before, bar)
    assert after["privacy"]["recovered_fraction"] == attack
    assert after["privacy"]["recovered_fraction_chance"] == chance
    assert after["privacy"]["recovered_bar"] == bar.bar()
    assert after["privacy"]["rescored_from"] == {"psnr": 20.0, "ssim": 0.0}
    assert before["privacy"]["recovered_fraction"] == 0.5  # the input is left alone
    assert f"to {bar.text()}" in summary(after)


def test_a_run_without_chance_pairs_gets_no_carried_over_chance_and_a_run_without_pairs_is_refused():
    assert rescore(_metrics(chance_pairs=False), Recovered(10.0, 0.0))["privacy"]["recovered_fraction_chance"] is None
    broken = _metrics()
    broken["privacy"]["matched"][0].pop("ssim")
    for bad in ({"privacy": {}}, broken):
        with pytest.raises(ConfigError):
            rescore(bad, Recovered())


def test_the_command_prints_writes_and_skips(tmp_path, capsys):
    run, failed = tmp_path / "a" / "run", tmp_path / "b"
    run.mkdir(parents=True)
    failed.mkdir()
    write_metrics(run, _metrics())
    (failed / "metrics.json").write_text(json.dumps({"privacy": {"failed": True}}))
    buffer = io.BytesIO()
    np.savez_compressed(buffer, psnr=np.array([30.0, 22.0]), ssim=np.array([0.9, 0.7]),
                        recovered=np.array([True, True]))
    (run / "gallery.npz").write_bytes(buffer.getvalue())
    main([str(tmp_path), "--psnr", "25", "--ssim", "0.8"])
    out = capsys.readouterr().out
    assert "recovered 0.25 of 4 to PSNR >= 25 dB and SSIM >= 0.8 (chance 0.00); was 0.50 to PSNR >= 20 dB" in out
    assert "b: skipped: no matched reconstruction" in out and "1 of 2 run(s) recounted at" in out
    assert json.loads((run / "metrics.json").read_text())["privacy"]["recovered_fraction"] == 0.5  # not written
    main([str(tmp_path), "--psnr", "25", "--ssim", "0.8", "--write"])
    written = json.loads((run / "metrics.json").read_text())["privacy"]
    assert written["recovered_fraction"] == 0.25 and written["recovered_bar"] == {"psnr": 25.0, "ssim": 0.8}
    assert "0.25" in (run / "metrics.csv").read_text()
    with np.load(run / "gallery.npz") as gallery:
        assert gallery["recovered"].tolist() == [True, False]
    for args in ([str(tmp_path), "--psnr", "nan"], [str(tmp_path / "missing"), "--psnr", "20"]):
        with pytest.raises(SystemExit) as exit_:
            main(args)
        assert exit_.value.code == 2
