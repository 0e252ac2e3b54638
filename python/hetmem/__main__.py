from hetmem.cli import main

raise SystemExit(main())
