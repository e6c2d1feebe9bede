from inspector.main import main

raise SystemExit(main())
