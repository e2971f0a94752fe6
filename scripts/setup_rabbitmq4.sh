#!/usr/bin/env bash
# Idempotent install of RabbitMQ 4.0 into .jvm/brokers/rabbitmq-4.0/, for the conformance cases
# of RabbitMQ's native AMQP 1.0 (seeds 002 and 004: the 170 link credits, the 400-frame session
# window), which Debian 12's RabbitMQ 3.10 does not have (its AMQP 1.0 plugin grants 65,536).
#
# Debian 13 (trixie) packages RabbitMQ 4.0 for Erlang 27, whose programs need glibc 2.38.
# Nothing of the system changes: the .deb files of rabbitmq-server, the Erlang applications it
# needs and the few libraries newer than Debian 12's (glibc, OpenSSL 3.5, libstdc++, zstd, ...)
# are downloaded from Debian's archive, checked against the SHA-256 of its index (itself checked
# against the suite's Release file, whose signature gpgv checks with Debian 12's archive keyring),
# unpacked with dpkg-deb into a folder of their own, and the Erlang programs and libraries are
# pointed at that folder's dynamic loader and libraries with patchelf (Debian 12's package,
# installed with apt-get when missing). Programs the node starts itself (sh, ps, df) stay the
# system's. ~43 MB of downloads, ~10 s. A second run prints one line and does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

MIRROR=${FLOWCTL_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=trixie
TARGET=.jvm/brokers/rabbitmq-4.0
MARKER="$TARGET/.installed"
PACKAGES="rabbitmq-server erlang-base erlang-asn1 erlang-crypto erlang-eldap erlang-inets
erlang-mnesia erlang-os-mon erlang-parsetools erlang-public-key erlang-runtime-tools erlang-ssl
erlang-syntax-tools erlang-tools erlang-xmerl libc6 libssl3t64 libzstd1 libstdc++6 libgcc-s1
zlib1g libtinfo6"

if [ -f "$MARKER" ]; then
  echo "setup_rabbitmq4: $(cat "$MARKER") already installed in $TARGET: nothing to do"
  exit 0
fi
for tool in curl python3 gpgv dpkg-deb sha256sum; do
  command -v "$tool" >/dev/null || { echo "setup_rabbitmq4: $tool is missing" >&2; exit 1; }
done
arch=$(dpkg --print-architecture)
if [ "$arch" != amd64 ]; then
  # The loader's and libraries' paths below are amd64's (x86_64-linux-gnu).
  echo "setup_rabbitmq4: only amd64 is handled (this machine: $arch)" >&2
  exit 1
fi
if ! command -v patchelf >/dev/null; then
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    echo "setup_rabbitmq4: patchelf is missing; as root: apt-get install -y patchelf" >&2
    exit 1
  fi
  echo "setup_rabbitmq4: installing Debian's patchelf"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq patchelf >/dev/null ||
    { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq patchelf >/dev/null; }
fi

mkdir -p .jvm/brokers
staging=$(mktemp -d .jvm/brokers/.rabbitmq4-XXXXXX)
trap 'rm -rf "$staging"' EXIT
# The suite's Release file, signed by Debian's archive keys (Debian 12's keyring holds them),
# gives the index's SHA-256; the index gives each package's.
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
curl -fsS --retry 3 -o "$staging/InRelease" "$MIRROR/dists/$SUITE/InRelease"
gpgv --keyring "$keyring" --output "$staging/Release" "$staging/InRelease" 2>/dev/null ||
  { echo "setup_rabbitmq4: $SUITE's InRelease is not signed by a key of $keyring" >&2; exit 1; }
index_sum=$(awk '$3 == "main/binary-amd64/Packages.xz" && length($1) == 64 {print $1; exit}' "$staging/Release")
curl -fsS --retry 3 -o "$staging/Packages.xz" "$MIRROR/dists/$SUITE/main/binary-amd64/Packages.xz"
echo "$index_sum  $staging/Packages.xz" | sha256sum -c --quiet - ||
  { echo "setup_rabbitmq4: $SUITE's package index does not match its Release file" >&2; exit 1; }
index="$staging/Packages"
# Python's lzma rather than xz-utils, which a minimal Debian may lack.
python3 -c 'import lzma, sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())' \
  "$staging/Packages.xz" >"$index"

# Filename, SHA256 and Version of package $1 in the index.
field() {
  awk -v p="$1" -v f="$2" '/^Package: /{hit=($2==p)} hit && index($0, f": ")==1 {print $2; exit}' "$index"
}
version=$(field rabbitmq-server Version)
case "$version" in
  4.0.*) ;;
  *) echo "setup_rabbitmq4: $SUITE's rabbitmq-server is '$version', not 4.0.x" >&2; exit 1 ;;
esac
echo "setup_rabbitmq4: downloading rabbitmq-server $version and Erlang $(field erlang-base Version) from $SUITE"
prefix="$staging/prefix"
mkdir -p "$staging/debs" "$prefix"
for package in $PACKAGES; do
  file=$(field "$package" Filename)
  sum=$(field "$package" SHA256)
  [ -n "$file" ] && [ -n "$sum" ] || { echo "setup_rabbitmq4: $package is not in $SUITE's index" >&2; exit 1; }
  deb="$staging/debs/$(basename "$file")"
  curl -fsS --retry 3 -o "$deb" "$MIRROR/$file"
  echo "$sum  $deb" | sha256sum -c --quiet - ||
    { echo "setup_rabbitmq4: $file does not match the index's SHA-256" >&2; exit 1; }
  dpkg-deb -x "$deb" "$prefix"
done
rm -rf "$staging/debs"

# Every ELF file of Erlang and of the private libraries loads through the private loader and
# finds the private libraries first (not ld.so and libc themselves).
final=$(pwd)/$TARGET
libs="$final/usr/lib/x86_64-linux-gnu:$final/lib/x86_64-linux-gnu"
loader="$final/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
[ -e "$prefix/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" ] ||
  { echo "setup_rabbitmq4: no dynamic loader in $SUITE's libc6" >&2; exit 1; }
while IFS= read -r -d '' file; do
  [ "$(head -c 4 "$file")" = $'\x7fELF' ] || continue
  case "$(basename "$file")" in ld-linux*|libc.so.6) continue ;; esac
  if patchelf --print-interpreter "$file" >/dev/null 2>&1; then
    patchelf --set-interpreter "$loader" "$file"
  fi
  patchelf --set-rpath "$libs" "$file"
done < <(find "$prefix/usr/lib/erlang" "$prefix/usr/lib/x86_64-linux-gnu" -type f -print0)
# Erlang's and RabbitMQ's scripts name their own folders.
erts=$(ls -d "$prefix"/usr/lib/erlang/erts-*)
for script in "$prefix/usr/lib/erlang/bin/erl" "$erts/bin/erl" "$prefix/usr/lib/erlang/bin/start" \
  "$erts/bin/start" "$prefix/usr/lib/erlang/releases/RELEASES" \
  "$prefix"/usr/lib/rabbitmq/lib/rabbitmq_server-*/sbin/*; do
  [ -f "$script" ] && sed -i -e "s#/usr/lib/erlang#$final/usr/lib/erlang#g" \
    -e "s#/usr/lib/rabbitmq#$final/usr/lib/rabbitmq#g" "$script"
done
echo "rabbitmq-server $version, Erlang $(field erlang-base Version) from Debian $SUITE" >"$prefix/.installed"
rm -rf "$TARGET"
mv "$prefix" "$TARGET"
"$TARGET"/usr/lib/erlang/bin/erl -noshell -eval 'io:format("~s~n", [erlang:system_info(otp_release)]), halt().' >/dev/null ||
  { echo "setup_rabbitmq4: the installed Erlang does not start" >&2; rm -rf "$TARGET"; exit 1; }
echo "setup_rabbitmq4: $(cat "$MARKER") installed in $TARGET"
