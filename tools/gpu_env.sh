# Source on the offline CUDA host, from the repository root:  source tools/gpu_env.sh
# Installs the carried wheels (.whl/, made with ../shared/gpu/wheels.sh: NumPy 2.4 for numba.cuda,
# array-api-compat) into /tmp/site and puts them and this checkout first on PYTHONPATH.
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || echo "gpu_env: wheel install failed" >&2
fi
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
python3 -c "import numpy, cupy; print('gpu_env: numpy', numpy.__version__, 'cupy', cupy.__version__, cupy.cuda.runtime.getDeviceProperties(0)['name'].decode())"
