"""Click groups shared by the `kgqr` subcommands."""

from __future__ import annotations

import click


class DefaultRunGroup(click.Group):
    """`kgqr X ARG ...` means `kgqr X run ARG ...` unless ARG names a subcommand, so the
    main job of a group needs no verb while its helpers (status, sweep, ...) have one."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["run", *args]
        return super().parse_args(ctx, args)
