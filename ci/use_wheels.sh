# Sourced by gpu_run.sh and nightly.sh: where ${WHEELS:-.whl} holds wheels (ci/peer_wheels.sh
# fetched them for a GPU machine without a registry), install them with --no-deps into a private
# folder and put it first on PYTHONPATH, so the peer backends and nvtx are there.
wheels=${WHEELS:-.whl}
if compgen -G "$wheels/*.whl" >/dev/null; then
    site=${WHEELS_SITE:-/tmp/dsv4-wheels}
    if python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$site" "$wheels"/*.whl; then
        export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
        echo "using the wheels of $wheels (installed into $site)"
    else
        echo "warning: installing the wheels of $wheels failed; going on without them" >&2
    fi
fi
