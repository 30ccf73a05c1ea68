"""`python -m rotkws …`: the `rotkws` command."""
import sys

from rotkws.cli import main

sys.exit(main())
