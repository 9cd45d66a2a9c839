# quell: two commands matter. `make demo` and `make test`. Both install what they need first.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# System packages the lab drives (Debian 12 / Ubuntu names). Debian's prometheus unit would
# listen on :9090; quell starts its own Prometheus, so the unit is disabled once installed.
# PostgreSQL likewise: the packaged cluster "15 main" (port 5432) is stopped and set to manual;
# the consolidation lab runs its own clusters on tmpfs (quell.studies.consolidation.postgres).
SYSTEM_PACKAGES := gcc libc6-dev haproxy lighttpd nginx apache2 php8.2-fpm httperf wrk stress-ng iperf3 fio \
	sysstat iproute2 procps psmisc util-linux prometheus clamav \
	postgresql postgresql-contrib php8.2-pgsql clang llvm libbpf-dev bpftool

NATIVE := src/quell/instrument/c
NATIVE_OUT := $(NATIVE)/build
CC ?= gcc
NATIVE_CFLAGS := -O2 -Wall -Wextra -fPIC -pthread

.PHONY: install system python native demo test lint typecheck unit bench results reference clean
install: system python native

system:
	@missing=$$(for p in $(SYSTEM_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" != 0 ]; then echo "quell: needs root to install: $$missing" >&2; exit 2; fi; \
	  echo "installing system packages: $$missing"; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
	    --no-install-recommends $$missing; \
	  case " $$missing " in *" prometheus "*) \
	    systemctl disable --now prometheus >/dev/null 2>&1 || true;; esac; \
	  case " $$missing " in *" postgresql "*) \
	    systemctl disable --now postgresql >/dev/null 2>&1 || true; \
	    pg_lsclusters -h 2>/dev/null | while read v n rest; do \
	      pg_ctlcluster $$v $$n stop >/dev/null 2>&1 || true; \
	      echo manual > /etc/postgresql/$$v/$$n/start.conf; done;; esac; \
	fi

python: $(STAMP)
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,controller,plots,lab,sim,research]'
	touch $(STAMP)

# The per-request instrumentation: the quelltoken library (quell.instrument.token loads it),
# the same with the LD_PRELOAD shims for lighttpd and php-fpm (the lab's `instrument: true`).
native: $(NATIVE_OUT)/libquelltoken.so $(NATIVE_OUT)/libquell_lighttpd.so $(NATIVE_OUT)/libquell_phpfpm.so bpf
$(NATIVE_OUT)/libquelltoken.so: $(NATIVE)/quelltoken.c $(NATIVE)/quelltoken.h
	@mkdir -p $(NATIVE_OUT)
	$(CC) $(NATIVE_CFLAGS) -shared -o $@ $(NATIVE)/quelltoken.c
$(NATIVE_OUT)/libquell_lighttpd.so: $(NATIVE)/quell_lighttpd.c $(NATIVE)/quelltoken.c $(NATIVE)/quelltoken.h
	@mkdir -p $(NATIVE_OUT)
	$(CC) $(NATIVE_CFLAGS) -shared -o $@ $(NATIVE)/quell_lighttpd.c $(NATIVE)/quelltoken.c -ldl
$(NATIVE_OUT)/libquell_phpfpm.so: $(NATIVE)/quell_phpfpm.c $(NATIVE)/quelltoken.c $(NATIVE)/quelltoken.h
	@mkdir -p $(NATIVE_OUT)
	$(CC) $(NATIVE_CFLAGS) -shared -o $@ $(NATIVE)/quell_phpfpm.c $(NATIVE)/quelltoken.c -ldl

# The optional eBPF run-queue split (quell.instrument.bpf): built only where clang and bpftool
# are present; vmlinux.h comes from the running kernel's BTF into the untracked build dir.
BPF := src/quell/instrument/bpf
BPF_OUT := $(BPF)/build
BPF_ARCH := $(shell uname -m | sed -e 's/x86_64/x86/' -e 's/aarch64/arm64/')
.PHONY: bpf
bpf:
	@if ! command -v clang >/dev/null || ! command -v bpftool >/dev/null; then \
	  echo "quell: skipping the eBPF run-queue split (needs clang and bpftool; optional)"; \
	elif [ ! -r /sys/kernel/btf/vmlinux ]; then \
	  echo "quell: skipping the eBPF run-queue split (the kernel has no BTF at /sys/kernel/btf/vmlinux)"; \
	else $(MAKE) --no-print-directory $(BPF_OUT)/rqwait.bpf.o; fi
$(BPF_OUT)/vmlinux.h:
	@mkdir -p $(BPF_OUT)
	bpftool btf dump file /sys/kernel/btf/vmlinux format c > $@.tmp && mv $@.tmp $@
$(BPF_OUT)/rqwait.bpf.o: $(BPF)/rqwait.bpf.c $(BPF)/rqwait.h $(BPF_OUT)/vmlinux.h
	clang -O2 -g -Wall -target bpf -D__TARGET_ARCH_$(BPF_ARCH) -I$(BPF_OUT) -I$(BPF) -c $< -o $@

demo: install
	$(VENV)/bin/quell lab compare scenarios/prima/demo.yaml --runs-dir runs

lint: python
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench
	$(VENV)/bin/lint-imports

typecheck: python
	$(VENV)/bin/mypy

unit: python
	$(VENV)/bin/pytest -q

test: install lint typecheck unit

bench: install
	$(PY) bench/run.py

# Every results page from the measured files in docs/results/data (and PRIMA's from the last
# bench); the consolidation study's figures from its records.
results: python
	$(VENV)/bin/quell prima results --data docs/results/data --bench bench/results/prima.json \
	  --out docs/results/prima.md
	$(VENV)/bin/quell ic2 results --data docs/results/data/ic2 --out docs/results/ic2.md
	$(VENV)/bin/quell attribute results --data docs/results/data/attribution \
	  --out docs/results/attribution.md
	$(VENV)/bin/quell study consolidation-results --data docs/results/data/consolidation \
	  --out docs/results/consolidation.md --figures docs/img/consolidation

# docs/reference/{scenario,live-config,cli,metrics}.md from the code (quell reference); the test
# suite fails, naming the page, when one of them differs from what the code gives.
reference: python
	$(VENV)/bin/quell reference --out docs/reference

clean:
	rm -rf $(VENV) build $(NATIVE_OUT) $(BPF_OUT) src/*.egg-info .mypy_cache .ruff_cache .pytest_cache
