from malhar.testing.cli import main

main()
