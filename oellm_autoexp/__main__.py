from oellm_autoexp.cli.main import main

raise SystemExit(main())
