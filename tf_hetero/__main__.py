from tf_hetero.tools.cli import main

raise SystemExit(main())
