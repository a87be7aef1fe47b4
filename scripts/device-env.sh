# Sourced: points pkg-config, the compiler and the loader at the extracted Debian prefix.
PREFIX="${KILN_DEPS_PREFIX:-/tmp/kiln-deps}"
export KILN_DEPS_PREFIX="$PREFIX"
lib="$PREFIX/usr/lib/x86_64-linux-gnu"
export PKG_CONFIG_PATH="$lib/pkgconfig:$lib/openblas-pthread/pkgconfig:$PREFIX/usr/share/pkgconfig"
export PKG_CONFIG_SYSROOT_DIR="$PREFIX"
export LD_LIBRARY_PATH="$lib:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
command -v pkg-config >/dev/null || export PATH="$PREFIX/usr/bin:$PATH"
export PATH="/usr/local/cuda/bin:$PATH"
