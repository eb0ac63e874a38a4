from grandrounds.cli import entry

entry()
