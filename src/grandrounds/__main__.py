from grandrounds.cli.main import entry

entry()
