from kjbod.cli.main import main

raise SystemExit(main())
