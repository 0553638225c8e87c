# Sourced by bench/device_check.sh and bench/device_run.sh (bash, from the repo's root, $PY
# set): the packages the device machine's Python lacks (posix_ipc, pydantic with its core,
# annotated-types and typing-inspection, structlog, pytest-asyncio), installed from the
# wheels carried in .whl/ into /tmp/site, then the repo on PYTHONPATH. Here, once, in the
# repo's root (the wheels travel with `carry: [".whl"]`):
#   echo /.whl/ >> .git/info/exclude
#   .venv/bin/python -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 -d .whl \
#     posix_ipc==1.3.2 pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 \
#     typing-inspection==0.4.5 structlog==26.1.0 pytest-asyncio==1.5.0
if ! $PY -c "import posix_ipc, pydantic, structlog, pytest_asyncio" 2>/dev/null; then
  if ! ls .whl/*.whl >/dev/null 2>&1; then
    echo "$0: posix_ipc, pydantic, structlog or pytest-asyncio is missing and .whl/ has no wheels (bench/device_wheels.sh says how)"
    exit 2
  fi
  $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 2
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
