from tf_hetero.cli import main

raise SystemExit(main())
