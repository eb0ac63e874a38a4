from grandrounds.cli import main

main()
