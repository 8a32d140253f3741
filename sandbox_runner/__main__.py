from sandbox_runner.cli import main

main()
