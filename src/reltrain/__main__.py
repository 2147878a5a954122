from reltrain.cli import main

raise SystemExit(main())
