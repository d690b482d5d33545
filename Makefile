.PHONY: setup demo test lint

setup:
	bash scripts/setup.sh

demo:
	bash scripts/demo.sh $(ARGS)

test:
	bash scripts/test.sh $(ARGS)

lint:
	.venv/bin/ruff check src tests benchmarks
	.venv/bin/ruff format --check src tests benchmarks
	.venv/bin/lint-imports
	.venv/bin/mypy
