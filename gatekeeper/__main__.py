import sys

from gatekeeper.cli.main import main

sys.exit(main())
