"""The ``python -m privbench`` Hydra app: compose the config, run one audit per job."""
from __future__ import annotations

import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from privbench.errors import PrivbenchError


@hydra.main(config_path="pkg://configs", config_name="config", version_base="1.3")
def app(cfg: DictConfig) -> float | None:
    """Run one audit; bad input ends with one ``privbench: error:`` line and exit status 2."""
    from privbench.audit.run import run_audit

    try:
        metrics = run_audit(cfg, Path(HydraConfig.get().runtime.output_dir))
    except PrivbenchError as exc:
        print(f"privbench: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    return metrics["privacy"].get("psnr_mean")


def main() -> None:
    """Console entry point: check the overrides, then hand over to Hydra."""
    from privbench.overrides import check_overrides

    args = [a for a in sys.argv[1:] if not a.startswith("-") and "=" in a]
    if not any(a in ("--help", "-h", "--hydra-help", "--info", "-i") for a in sys.argv[1:]):
        try:
            check_overrides(args)
        except PrivbenchError as exc:
            print(f"privbench: error: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
    app()


if __name__ == "__main__":
    main()
