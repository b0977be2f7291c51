"""``python -m privbench.app_audit PATH``: the same as ``privbench audit-app PATH``."""
import sys

from privbench.app_audit.command import main

if __name__ == "__main__":
    sys.exit(main())
