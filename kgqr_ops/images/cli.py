"""`kgqr images build|list|env`: container images of every kgqr service, made from the
package registries only (Debian, Maven Central, PyPI), for docker/compose.yml and the test
suite's testcontainers path."""

from __future__ import annotations

import click

from kgqr_core.settings import get_settings
from kgqr_ops.images.base_image import BASE_TAG, ensure_base_image
from kgqr_ops.images.builder import build_image, build_log
from kgqr_ops.images.catalog import IMAGES
from kgqr_ops.images.engine import ContainerEngine, container_engine
from kgqr_ops.services.errors import ServiceError


def _engine() -> ContainerEngine:
    return container_engine(get_settings())


@click.group("images")
def images() -> None:
    """Container images of OpenSearch, Neo4j, Redis, the LLM and kgqr itself.

    No container registry is needed: the base is a Debian root filesystem made with
    debootstrap, and each image adds what `kgqr services up` assembles from Maven Central,
    the OS packages and PyPI. Builds use podman (installed from the OS packages when
    missing) or docker (KGQR_CONTAINER_ENGINE). Then run the stack with
    `podman-compose -f docker/compose.yml up -d` (docs/containers.md).
    """


@images.command()
@click.argument("names", nargs=-1, type=click.Choice(sorted(IMAGES)))
@click.option("--refresh-base", is_flag=True, help="Make the Debian base image again "
              "(for Debian's updates); every image is then rebuilt on it.")  # fmt: skip
def build(names: tuple[str, ...], refresh_base: bool) -> None:
    """Build NAMES (default: all), rebuilding only what changed since the last build.

    The first build of all five takes about 8 minutes (kgqr's image holds torch: 6.8 GB);
    an unchanged image takes seconds. The LLM's image reuses the llama-cpp-python wheel
    and model `kgqr services up llm` made (both are made first when missing).
    """
    settings = get_settings()
    engine = _engine()
    if ensure_base_image(engine, refresh=refresh_base):
        click.echo(f"base: made {BASE_TAG} with debootstrap")
    failures = 0
    for name in names or tuple(IMAGES):
        spec = IMAGES[name]
        log = build_log(settings.home / "images", spec)
        click.echo(f"{name}: building {spec.tag(settings)} ({spec.about}; log: {log}) ...")
        try:
            built = build_image(engine, spec, settings, settings.home / "images")
        except ServiceError as exc:
            failures += 1
            click.secho(f"{name}: FAILED: {exc}", fg="red", err=True)
            continue
        what = "built" if built.changed else "unchanged"
        click.echo(f"{name}: {what} {built.tag} ({built.image_id[:12]}) in {built.seconds:.0f}s")
    if failures:
        raise SystemExit(1)


@images.command("list")
def list_images() -> None:
    """Each image's tag, and whether it is built."""
    settings = get_settings()
    engine = _engine()
    for name, spec in IMAGES.items():
        tag = spec.tag(settings)
        image_id = engine.image_id(tag)
        state = image_id[:12] if image_id else "not built"
        click.echo(f"{name:11} {tag:40} {state}")


@images.command()
def env() -> None:
    """Shell lines that let podman, podman-compose and testcontainers use the engine as
    kgqr does: `eval "$(kgqr images env)"`. Starts podman's Docker-API socket."""
    engine = _engine()
    for name, value in engine.environment().items():
        click.echo(f"export {name}={value}")
    click.echo(f"export DOCKER_HOST=unix://{engine.api_socket()}")
