from gpucarve.cli.main import run

run()
