# SPDX-License-Identifier: BSD-3-Clause
from hetmem.cli import main

raise SystemExit(main())
