"""C{python -m kilolock.kl}: the same as the C{kl} console script."""

import sys

from kilolock.kl.main import main

sys.exit(main())
