"""Pictures of a running farm: the ``"rgb_array"`` and ``"human"`` render modes of ServerFarmEnv.

:class:`FarmRenderer` draws one frame from what the env exposes read-only (``occupancy``,
``level_counts``, ``job_type``, ``last_decision``, ``running_stats``; see ``ServerFarmEnv``) with
matplotlib. The figure and its artists are built once, at the first frame, and each later frame
only updates their data, so a frame costs the same on a 4-server and a 10,000-server farm.

Frame layout (``size`` pixels, 960 x 540 by default):

* top line: scenario, number of servers, action mode, simulated time and steps since reset;
* left, the farm: one labelled block per group (name, servers, buffer B_k). Small farms show one
  cell per server (servers numbered row by row, group by group, as the env numbers them),
  coloured by its occupancy n / B_k (colour bar on the right of the farm; the number of jobs is
  written in the cells when they are large enough). When cells would be smaller than
  ``min_cell_px`` pixels (or the farm has more than ``max_cells`` servers) each group is drawn
  as an occupancy histogram instead: bar b is the share of the group's servers holding b jobs,
  coloured like a cell at that level. Groups the arriving job may use are outlined in its
  type's colour; the others are faded. The server that received the previous job is framed
  (in the aggregate view an arrow points at the (group, level) bar it was taken from);
* right: the arriving job (type, the groups it may use), the previous decision (action, the
  server it chose, and whether a masked action was replaced by the fallback), the running
  throughput, power, efficiency and blocking since reset, and the running efficiency against
  PAS's: a curve over the rendered frames and PAS's long-run efficiency on this farm as a
  dashed line. PAS's value comes from a seeded simulation of the simulator's built-in PAS
  dispatcher, run once, at the first frame.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Protocol

import numpy as np
from numpy.typing import NDArray

from serverfarm_gym.envs.config import FarmConfig
from serverfarm_gym.envs.observation import decode_group_action
from serverfarm_gym.envs.simulator import FarmSimulator

RENDER_MODES = ("ansi", "rgb_array", "human")
FRAME_SIZE = (960, 540)  # pixels (width, height): 16:9, what video players expect
_DPI = 100
_CMAP = "YlOrRd"
_HIGHLIGHT = "#0070ff"  # the chosen server
_HISTORY = 2_000  # points of the efficiency curve kept (older ones are thinned out)


class Decision(NamedTuple):
    """What the last step did with the job it was given (read before the step changed the farm).

    ``action`` is the agent's action; ``server`` the server that got the job, ``group`` and
    ``level`` its group and occupancy before the job arrived; ``fallback`` is True when the action
    was masked out and the job went where PAS sends it (``invalid_action="fallback"``)."""

    job_type: int
    action: int
    server: int
    group: int
    level: int
    fallback: bool


class RenderedEnv(Protocol):
    """What the renderer reads of the env it draws (an ``serverfarm_gym.envs.server_farm.ServerFarmEnv``: that
    module imports this one, and the layers contract forbids the cycle even under TYPE_CHECKING,
    so the env is described here rather than imported)."""

    config: FarmConfig
    action_mode: str
    objective: str
    sim: FarmSimulator

    @property
    def job_type(self) -> int: ...
    @property
    def last_decision(self) -> Decision | None: ...
    @property
    def occupancy(self) -> NDArray[np.int64]: ...
    @property
    def level_counts(self) -> NDArray[np.int64]: ...
    @property
    def running_stats(self) -> dict[str, float]: ...
    def action_masks(self) -> NDArray[np.int8]: ...


def pas_reference(config: FarmConfig, objective: str = "energy", seed: int = 12345) -> float:
    """Long-run efficiency of PAS on ``config`` (work per energy, or per money with
    ``objective="cost"``): the simulator's built-in PAS dispatcher (priority mu_k/(eps_k - eps0_k),
    ties to the smallest server), a warm-up, then a measured run, both scaled with the farm size."""
    sim = FarmSimulator(config, seed=seed)
    table = np.repeat(config.group_efficiency[:, None], config.max_buffer + 1, axis=1)
    # the warm-up fills the farm (10 arrivals per server), the run measures: on tiny the estimate
    # has a relative standard deviation of about 0.25% (tests/envs/test_render.py)
    sim.run(max(10_000, 10 * config.n_servers), table=table)
    st = sim.run(max(100_000, 20 * config.n_servers), table=table)
    return st.cost_efficiency if objective == "cost" else st.efficiency


def _cell_columns(
    counts: list[int], width: float, height: float, label: float
) -> tuple[int, float]:
    """(columns, cell size in pixels) maximising the cell size when the groups are stacked
    vertically, each ``ceil(R_k / columns)`` rows under a label ``label`` cells high."""
    best_c, best_px = 1, 0.0
    for c in range(1, max(counts) + 1):
        rows = sum(-(-r // c) for r in counts) + label * len(counts)
        px = min(width / c, height / rows)
        if px > best_px:
            best_c, best_px = c, px
        elif width / c < best_px:  # cells only get narrower from here
            break
    return best_c, best_px


class FarmRenderer:
    """Draws frames of a :class:`~serverfarm_gym.envs.server_farm.ServerFarmEnv` (see the module docstring).

    Args:
        mode: ``"rgb_array"`` (``render`` returns ``uint8[H, W, 3]``) or ``"human"`` (a matplotlib
            window, refreshed at ``fps``; ``render`` returns None).
        size: frame size in pixels, (width, height).
        max_cells, min_cell_px: when to draw per-group histograms instead of one cell per server.
        fps: frames per second of the human window.
    """

    # the Agg canvas's saved static pixels (set by _build, which render() calls first)
    _a_background: object | None

    def __init__(
        self,
        mode: str,
        size: tuple[int, int] = FRAME_SIZE,
        max_cells: int = 2_000,
        min_cell_px: float = 6.0,
        fps: float = 10.0,
    ):
        if mode not in ("rgb_array", "human"):
            raise ValueError(f"mode: FarmRenderer draws 'rgb_array' or 'human', got {mode!r}")
        self.mode = mode
        self.size = (int(size[0]), int(size[1]))
        self.max_cells = int(max_cells)
        self.min_cell_px = float(min_cell_px)
        self.fps = float(fps)
        self.pas_efficiency: float | None = None  # computed at the first frame
        self.aggregate = False
        self._fig: Any = None
        self._times: list[float] = []
        self._effs: list[float] = []

    # ---- lifecycle -------------------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        # a copied env gets a renderer without the figure (rebuilt at its first frame)
        state = self.__dict__.copy()
        state["_fig"] = None
        return {k: v for k, v in state.items() if not k.startswith("_a_")}

    def clear_history(self) -> None:
        """Forget the efficiency curve (the env calls this at every reset)."""
        self._times.clear()
        self._effs.clear()

    def close(self) -> None:
        if self._fig is not None and self.mode == "human":
            import matplotlib.pyplot as plt

            plt.close(self._fig)
        self._fig = None

    # ---- frames ----------------------------------------------------------------------------------
    def render(self, env: RenderedEnv) -> np.ndarray | None:
        """Draw the env's current state; the frame as ``uint8[H, W, 3]`` in ``"rgb_array"`` mode."""
        if self._fig is None:
            if self.pas_efficiency is None:
                self.pas_efficiency = pas_reference(env.config, env.objective)
            self._build(env)
        self._update(env)
        fig = self._fig
        if self.mode == "human":
            if fig.canvas.required_interactive_framework is None:  # Agg & co: no window to show
                fig.canvas.draw()
                return None
            import matplotlib.pyplot as plt

            plt.pause(1.0 / self.fps)  # draws and runs the window's event loop
            return None
        # blitting: the static part (axes, ticks, colour bar, legends) was drawn once, a frame
        # pastes it and draws only what changes (text and tick drawing dominate a full draw)
        if self._a_background is None:  # first frame, or the efficiency chart's axes changed
            fig.canvas.draw()
            self._a_background = fig.canvas.copy_from_bbox(fig.bbox)
        fig.canvas.restore_region(self._a_background)
        for a in self._a_dyn:
            fig.draw_artist(a)
        frame: NDArray[np.uint8] = np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
        return frame  # a typed name: numpy's .copy() is untyped

    def _dyn(self, artist: Any) -> Any:
        """Register an artist that changes between frames (drawn in registration order)."""
        self._a_dyn.append(artist)
        return artist

    def _build(self, env: RenderedEnv) -> None:
        import matplotlib as mpl

        c = env.config
        w, h = self.size
        figsize = (w / _DPI, h / _DPI)
        if self.mode == "human":
            import matplotlib.pyplot as plt

            fig = plt.figure(figsize=figsize, dpi=_DPI)
            if fig.canvas.required_interactive_framework is not None:
                plt.show(block=False)
        else:  # no pyplot: no global figure registry, works with any backend
            from matplotlib.backends.backend_agg import FigureCanvasAgg
            from matplotlib.figure import Figure

            fig = Figure(figsize=figsize, dpi=_DPI)
            FigureCanvasAgg(fig)
        self._fig = fig
        self._a_dyn: list[Any] = []
        fig.patch.set_facecolor("white")
        self._a_cmap = mpl.colormaps[_CMAP]
        self._a_title = self._dyn(
            fig.text(0.015, 0.965, "", fontsize=11, weight="bold", va="center")
        )
        farm = (0.015, 0.06, 0.60, 0.85)  # left, bottom, width, height (figure fraction)
        counts = [g.count for g in c.groups]
        cols, cell_px = _cell_columns(counts, farm[2] * w, farm[3] * h, label=0.9)
        self.aggregate = c.n_servers > self.max_cells or cell_px < self.min_cell_px
        if self.aggregate:
            self._build_histograms(env, farm)
        else:
            self._build_cells(env, farm, cols, cell_px)
        cax = fig.add_axes((0.625, 0.18, 0.012, 0.6))
        sm = mpl.cm.ScalarMappable(mpl.colors.Normalize(0.0, 1.0), self._a_cmap)
        cb = fig.colorbar(sm, cax=cax, ticks=[0, 0.25, 0.5, 0.75, 1])
        cb.ax.set_yticklabels(["0", "", "1/2", "", "full"], fontsize=8)
        cb.set_label("occupancy n / B_k", fontsize=8)
        # the info panel: changing text is drawn every frame, so the labels are static text
        y = [0.91 - 0.042 * i for i in range(12)]
        self._a_lines = [self._dyn(fig.text(0.685, y[i], "", fontsize=9)) for i in range(4)]
        what = "jobs/money" if env.objective == "cost" else "efficiency"
        labels = ["throughput", "power", "efficiency", "blocking", f"PAS {what}"]
        fig.text(0.685, y[5], "since reset:", fontsize=9)
        for i, text in enumerate(labels):
            fig.text(0.695, y[6 + i], text, fontsize=9)
        self._a_values = [self._dyn(fig.text(0.83, y[6 + i], "", fontsize=9)) for i in range(5)]
        self._a_ratio = self._dyn(fig.text(0.685, y[11], "", fontsize=9, weight="bold"))
        self._a_eff_ax = ax = fig.add_axes((0.735, 0.08, 0.25, 0.22))
        (self._a_eff_line,) = ax.plot([], [], color=_HIGHLIGHT, lw=1.5, label="this policy")
        self._dyn(self._a_eff_line)
        assert self.pas_efficiency is not None  # render() computes it before the first layout
        ax.axhline(self.pas_efficiency, color="k", ls="--", lw=1, label="PAS")
        fig.legend(*ax.get_legend_handles_labels(), fontsize=7, frameon=False, ncols=2,
                   loc="lower right", bbox_to_anchor=(0.99, 0.30))  # fmt: skip
        ax.tick_params(labelsize=7)
        ax.xaxis.set_major_locator(mpl.ticker.MaxNLocator(4))
        ax.xaxis.set_major_formatter(mpl.ticker.FormatStrFormatter("%g"))
        ax.set_xlabel("time since reset", fontsize=8)
        self._a_limits: tuple[float, float, float] | None = None
        self._a_background = None
        if self.mode == "rgb_array":
            for a in self._a_dyn:
                a.set_animated(True)  # left out of full draws: the background

    def _build_cells(
        self, env: RenderedEnv, farm: tuple[float, float, float, float], cols: int, cell_px: float
    ) -> None:
        from matplotlib.collections import LineCollection
        from matplotlib.patches import Rectangle

        c, fig = env.config, self._fig
        ax = fig.add_axes(farm)
        ax.set_axis_off()
        label = 0.9
        rows = [-(-g.count // cols) for g in c.groups]
        height = sum(rows) + label * len(rows)
        ax.set_xlim(-0.1, cols + 0.1)
        ax.set_ylim(-0.1, height + 0.1)
        ax.set_aspect("equal", anchor="NW")
        self._a_images, self._a_outline, self._a_fade, self._a_labels = [], [], [], []
        self._a_cell_xy = np.zeros((c.n_servers, 2))  # lower-left corner of each server's cell
        top = height
        segments = []
        for k, g in enumerate(c.groups):
            r = rows[k]
            top -= label
            text = f"{g.name}: {g.count} servers, B={g.buffer}"
            self._a_labels.append(ax.text(0, top + 0.12 * label, text, fontsize=9, va="bottom"))
            self._a_images.append(
                ax.imshow(np.full((r, cols), np.nan), cmap=self._a_cmap, vmin=0, vmax=1,
                          extent=(0, cols, top - r, top), interpolation="nearest", aspect="auto")
            )  # fmt: skip
            i = np.arange(g.count)
            s0 = c.group_offsets[k]
            self._a_cell_xy[s0 : s0 + g.count, 0] = i % cols
            self._a_cell_xy[s0 : s0 + g.count, 1] = top - 1 - i // cols
            for x, y in self._a_cell_xy[s0 : s0 + g.count]:
                segments.append([(x, y), (x + 1, y), (x + 1, y + 1), (x, y + 1), (x, y)])
            pad = 0.06
            box = ((-pad, top - r - pad), cols + 2 * pad, r + 2 * pad)
            self._a_outline.append(ax.add_patch(Rectangle(*box, fill=False, lw=2.5)))
            self._a_fade.append(ax.add_patch(Rectangle(*box, color="white", alpha=0.65)))
            top -= r
        grid = ax.add_collection(LineCollection(segments, colors="0.6", linewidths=0.6))
        self._a_numbers = []
        if cell_px >= 20 and c.n_servers <= 32:  # (each text costs ~0.3 ms a frame)
            fs = min(14.0, 0.35 * cell_px)
            self._a_numbers = [
                ax.text(x + 0.5, y + 0.5, "", ha="center", va="center", fontsize=fs)
                for x, y in self._a_cell_xy
            ]
        self._a_chosen = ax.add_patch(Rectangle((0, 0), 1, 1, fill=False, lw=3, ec=_HIGHLIGHT))
        # drawing order: cells, grid, numbers, fading of groups the job may not use, outlines
        for a in [*self._a_images, grid, *self._a_numbers, *self._a_fade, *self._a_outline,
                  *self._a_labels, self._a_chosen]:  # fmt: skip
            a.set_zorder(len(self._a_dyn))
            self._dyn(a)

    def _build_histograms(self, env: RenderedEnv, farm: tuple[float, float, float, float]) -> None:
        from matplotlib.patches import Rectangle

        c, fig = env.config, self._fig
        K = c.n_groups
        ncols = min(K, 5)
        nrows = -(-K // ncols)
        left, bottom, width, height = farm
        cw, rh = width / ncols, height / nrows
        self._a_bars, self._a_outline, self._a_labels, self._a_marks = [], [], [], []
        for k, g in enumerate(c.groups):
            col, row = k % ncols, k // ncols
            box = (left + col * cw + 0.012, bottom + (nrows - 1 - row) * rh + 0.06,
                   cw - 0.024, rh - 0.15)  # fmt: skip
            ax = fig.add_axes(box)
            levels = np.arange(g.buffer + 1)
            colours = self._a_cmap(levels / g.buffer)
            bars = ax.bar(
                levels, np.zeros(len(levels)), width=0.8, color=colours, ec="0.55", lw=0.6
            )
            self._a_bars.append([self._dyn(b) for b in bars])
            # an arrow over the bar the last job was taken from (a bar can be too low to see)
            (mark,) = ax.plot([0], [1.0], "v", ms=9, color=_HIGHLIGHT, clip_on=False)
            self._a_marks.append(self._dyn(mark))
            ax.set_ylim(0, 1)
            ax.set_xticks(levels)
            ax.tick_params(labelsize=7)
            ax.set_xlabel("jobs on a server", fontsize=7)
            if col == 0:
                ax.set_ylabel("share of servers", fontsize=7)
            else:
                ax.set_yticklabels([])
            text = f"{g.name}\n{g.count:,} servers, B={g.buffer}"
            x, y = box[0] + box[2] / 2, box[1] + box[3] + 0.025
            label = fig.text(x, y, text, fontsize=7.5, ha="center", linespacing=1.1)
            self._a_labels.append(self._dyn(label))
            pad = 0.004
            outline = Rectangle((box[0] - pad, box[1] - pad), box[2] + 2 * pad, box[3] + 2 * pad,
                                fill=False, lw=2.0, transform=fig.transFigure)  # fmt: skip
            self._a_outline.append(self._dyn(fig.add_artist(outline)))

    # ---- per frame -------------------------------------------------------------------------------
    def _update(self, env: RenderedEnv) -> None:
        c = env.config
        j = env.job_type
        allowed = c.availability[j] if j >= 0 else np.ones(c.n_groups, dtype=bool)
        colour = _type_colour(j)
        d = env.last_decision
        if self.aggregate:
            self._update_histograms(env, allowed, colour, d)
        else:
            self._update_cells(env, allowed, colour, d)
        st = env.running_stats
        if self._times and st["time"] < self._times[-1]:
            self.clear_history()  # a reset the env did not report
        eff = st["cost_efficiency" if env.objective == "cost" else "efficiency"]
        if not self._times or st["time"] > self._times[-1]:  # (a state drawn again: no new point)
            self._times.append(st["time"])
            self._effs.append(eff)
        if len(self._times) > _HISTORY:  # thin out the past, keep the latest point
            self._times[:] = self._times[-1::-2][::-1]
            self._effs[:] = self._effs[-1::-2][::-1]
        self._a_title.set_text(
            f"{c.name}: {c.n_servers:,} servers, {c.n_groups} groups, {env.action_mode} actions"
            f"    t = {st['time']:.2f}, step {st['steps']:,}"
        )
        self._update_text(env, j, colour, d, st, eff)
        self._update_curve()

    def _update_cells(
        self, env: RenderedEnv, allowed: NDArray[np.bool_], colour: str, d: Decision | None
    ) -> None:
        c = env.config
        occ = env.occupancy
        frac = occ / c.buffers[c.server_group]
        for k, img in enumerate(self._a_images):
            a = img.get_array()
            s0, s1 = c.group_offsets[k], c.group_offsets[k + 1]
            a.ravel()[: s1 - s0] = frac[s0:s1]
            img.set_data(a)
            self._a_outline[k].set_edgecolor(colour)
            self._a_outline[k].set_visible(bool(allowed[k]))
            self._a_fade[k].set_visible(not allowed[k])
            self._a_labels[k].set_color(colour if allowed[k] else "0.6")
            self._a_labels[k].set_weight("bold" if allowed[k] else "normal")
        if self._a_numbers:
            for t, n in zip(self._a_numbers, occ.tolist(), strict=True):
                t.set_text(str(n))
        if d is None:
            self._a_chosen.set_visible(False)
        else:
            self._a_chosen.set_visible(True)
            self._a_chosen.set_xy(tuple(self._a_cell_xy[d.server]))
            self._a_chosen.set_linestyle("--" if d.fallback else "-")

    def _update_histograms(
        self, env: RenderedEnv, allowed: NDArray[np.bool_], colour: str, d: Decision | None
    ) -> None:
        c = env.config
        counts = env.level_counts
        for k, bars in enumerate(self._a_bars):
            share = counts[k, : len(bars)] / c.groups[k].count
            for bar, v in zip(bars, share.tolist(), strict=True):
                bar.set_height(v)
                bar.set_alpha(1.0 if allowed[k] else 0.35)
            self._a_outline[k].set_edgecolor(colour)
            self._a_outline[k].set_visible(bool(allowed[k]))
            self._a_labels[k].set_color(colour if allowed[k] else "0.6")
            self._a_labels[k].set_weight("bold" if allowed[k] else "normal")
        for k, mark in enumerate(self._a_marks):
            mark.set_visible(d is not None and d.group == k)
            if d is not None and d.group == k:
                mark.set_xdata([d.level])
                mark.set_linestyle("none")
                mark.set_markerfacecolor("none" if d.fallback else _HIGHLIGHT)

    def _update_text(
        self, env: RenderedEnv, j: int, colour: str, d: Decision | None, st: dict[str, float],
        eff: float,
    ) -> None:  # fmt: skip
        c = env.config
        lines: list[tuple[str, str]] = []
        if j >= 0:
            names = ", ".join(c.groups[k].name for k in np.flatnonzero(c.availability[j]))
            lines += [
                (f"arriving job: {c.job_types[j].name}", colour),
                (f"  may use: {names}", colour),
            ]
        else:
            lines += [("arriving job: none (call reset)", "k"), ("", "k")]
        if d is None:
            lines += [("last job: none since reset", "0.4"), ("", "k")]
        else:
            g = c.groups[d.group]
            within = d.server - int(c.group_offsets[d.group])
            act = f"action {d.action}"
            if env.action_mode == "group":
                act += f" = ({g.name}, {d.level} jobs)"
            if d.fallback:
                act = f"action {d.action} masked: PAS fallback"
            lines += [
                (f"last job: {c.job_types[d.job_type].name}, {act}", _HIGHLIGHT),
                (f"  -> server {d.server} ({g.name} #{within}, had {d.level} jobs)", _HIGHLIGHT),
            ]
        for t, (text, col) in zip(self._a_lines, lines, strict=True):
            t.set_text(text)
            t.set_color(col)
        values = [
            f"{st['throughput']:.4g} jobs/time",
            f"{st['power']:.4g}",
            f"{st['efficiency']:.4f} jobs/energy",
            f"{100 * st['blocking']:.2f}%",
            f"{self.pas_efficiency or 0.0:.4f}",
        ]
        for t, text in zip(self._a_values, values, strict=True):
            t.set_text(text)
        pas = self.pas_efficiency or 0.0
        self._a_ratio.set_text(f"this policy: {100 * eff / pas:.1f}% of PAS" if pas > 0 else "")

    def _update_curve(self) -> None:
        """The efficiency curve. Its axes are part of the blitted background, so their limits
        move in steps (the time axis doubles, the efficiency axis is PAS +- 5, 10, 20, 50 or
        100%), each step redrawing the background once."""
        t, e = self._times, self._effs
        self._a_eff_line.set_data(t, e)
        pas = self.pas_efficiency or 0.0
        recent = e[len(e) // 2 :]  # the first frames of an episode are noisy
        dev = max((abs(v / pas - 1.0) for v in recent), default=0.0) if pas > 0 else 1.0
        m = next((m for m in (0.05, 0.1, 0.2, 0.5) if dev <= m), 1.0)
        t_end = max(t[-1] if t else 0.0, 1e-9)
        span = 2.0 ** math.ceil(math.log2(t_end))
        if (m, span, pas) != self._a_limits:
            self._a_limits = (m, span, pas)
            ref = pas if pas > 0 else 1.0
            self._a_eff_ax.set_ylim(ref * (1 - m), ref * (1 + m))
            self._a_eff_ax.set_xlim(0.0, span)
            self._a_background = None


def _type_colour(j: int) -> str:
    """A distinct colour per job type (matplotlib's tab10 cycle without blue: blue marks the
    chosen server)."""
    if j < 0:
        return "k"
    cycle = ["#2ca02c", "#9467bd", "#d62728", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
    return cycle[j % len(cycle)]


def chosen(env: RenderedEnv, action: int) -> Decision:
    """Where ``action`` sends the pending job, read before the step (the compiled step does not
    report it): the action's server, the smallest-index server of the action's (group, level), or
    for a masked action PAS's server, which is what the step's fallback picks."""
    c, sim = env.config, env.sim
    j = env.job_type
    mask = env.action_masks()
    fallback = not (0 <= action < len(mask) and mask[action])
    if fallback:
        eff = np.where(sim.server_mask(j), c.group_efficiency[c.server_group], -math.inf)
        s = int(np.argmax(eff))  # highest PAS priority, ties to the smallest index
    elif env.action_mode == "server":
        s = int(action)
    else:
        k, b = decode_group_action(c, action)
        s = sim.server_at_level(k, b)
    return Decision(j, int(action), s, int(c.server_group[s]), int(sim.occ[s]), fallback)
