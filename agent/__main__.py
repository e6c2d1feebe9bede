from agent.main import main

raise SystemExit(main())
