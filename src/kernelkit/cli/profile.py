"""The commands that look inside one case (profile, ncu, asm, codegen): parse arguments, call kernelkit.profiling,
print."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from kernelkit.cli.common import (
    EXIT_FAILED,
    EXIT_USAGE,
    CompileModeOpt,
    DeviceOpt,
    DtypeOpt,
    OpOpt,
    SizeOpt,
    SolutionOpt,
    TargetArg,
    add_commands,
    err,
    fail,
    out,
    with_solution,
)
from kernelkit.errors import BackendUnavailable, CompileError, KernelkitError, describe_exception
from kernelkit.results import BASELINE_NAMES as BASELINES

if TYPE_CHECKING:
    from kernelkit.spec import Impl

ImplOrAll = Annotated[str | None, typer.Option("--impl", "-i", help="The impl; default: every impl that can run here, "
                                                                     "in turn.")]


def register(app: typer.Typer) -> None:
    add_commands(app, {"profile": profile_command, "ncu": ncu_command, "asm": asm_command, "codegen": codegen_command})


def profile_command(
    target: TargetArg,
    impl: ImplOrAll = None,
    size: SizeOpt = None,
    dtype: DtypeOpt = None,
    device: DeviceOpt = None,
    steps: Annotated[int, typer.Option(help="Profiled impl calls (after 1 skipped and 2 warm-up calls).")] = 5,
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="Folder for the traces; default: ./kernelkit-results/profile.")
    ] = None,
    tensorboard: Annotated[bool, typer.Option(help="Also write a TensorBoard trace to OUT/tensorboard.")] = False,
    solution: SolutionOpt = None,
) -> None:
    """Profile one case under torch.profiler: op table, Chrome/Perfetto trace, and a launch diagnosis.

    The table is sorted by GPU time on CUDA, by CPU time on the CPU. The diagnosis says how busy the GPU was and
    which kernels wait on the CPU (launch-bound). Without --impl, every impl that can run here is profiled in turn
    (the others are listed as skipped). Exit code: 0 when profiled, 1 when the kernel did not build or the impl
    raised, 2 for bad arguments or an impl that cannot run here.
    """
    from kernelkit.profiling.torch_profiler import profile
    from kernelkit.report.profile_table import print_profile

    target = with_solution(target, solution)
    _check_case_args(size, dtype)

    def one(name: str) -> None:
        print_profile(out, profile(target, name, size=size, dtype=dtype, device=device, steps=steps, out_dir=out_dir,
                                   tensorboard=tensorboard))

    if impl is None:
        raise typer.Exit(_each_impl(target, None, device, one, "profiled"))
    try:
        one(impl)
    except KernelkitError as exc:
        raise fail(exc, EXIT_FAILED if isinstance(exc, CompileError) else EXIT_USAGE) from None
    except Exception as exc:  # noqa: BLE001 - most likely the impl's own error, reported with the user's line
        raise fail(RuntimeError(describe_exception(exc)), EXIT_FAILED) from None


def _check_case_args(size: str | None, dtype: str | None) -> None:
    """A bad --size or --dtype is named once, exit 2, before any impl is built or run."""
    from kernelkit.values import to_dtype, to_size

    try:
        to_size(size)
        to_dtype(dtype)
    except KernelkitError as exc:
        raise fail(exc, EXIT_USAGE) from None


def _impls(target: str, op_name: str | None, device: str | None) -> dict[str, Impl]:
    """The registered impls of the target's op (baselines run when named: --impl compile)."""
    from kernelkit.target import open_target

    try:
        return dict(open_target(target, device).op(op_name).impls)
    except KernelkitError as exc:
        raise fail(exc, EXIT_USAGE) from None


def _each_impl(target: str, op_name: str | None, device: str | None, run: Callable[[str], None], done: str) -> int:
    """``run`` each impl of the op in turn; one that cannot run here is listed as skipped, one that fails does not
    stop the rest. The exit code: 0 when every impl that could run did, 1 otherwise, 2 when none could run."""
    from kernelkit import backends
    from kernelkit.target import resolve_device

    names = _impls(target, op_name, device)
    here = resolve_device(device)
    ran, failed, skipped = [], [], []
    for name, impl in names.items():
        if impl.backend in backends.names() and not backends.backend(impl.backend).runs_on(here):
            # Not built just to be skipped (a load_inline extension's compile-only check takes minutes on a CPU);
            # `kernelkit check` is where a build that cannot run is still checked.
            skipped.append(f"{name}: {impl.backend} impls run on a GPU only; `kernelkit check` checks that it builds")
            continue
        try:
            run(name)
        except BackendUnavailable as exc:
            skipped.append(f"{name}: {exc}")
            continue
        except Exception as exc:  # noqa: BLE001 - one impl's failure is reported, the others still run
            text = str(exc) if isinstance(exc, KernelkitError) else describe_exception(exc)
            err.print(f"[bold red]error[/] ({escape(name)}): {escape(text)}", highlight=False)
            failed.append(name)
            continue
        ran.append(name)
    for line in skipped:
        err.print(f"[dim]skipped {escape(line)}[/]", highlight=False)
    err.print(f"{done} {len(ran)} of {len(names)} impls ({', '.join(ran) or 'none'}); --impl NAME for one",
              highlight=False)
    if failed:
        return EXIT_FAILED
    return 0 if ran else EXIT_USAGE


def ncu_command(
    target: TargetArg,
    impl: Annotated[str | None, typer.Option("--impl", "-i", help="The impl to profile; default: the op's first "
                                                                   "optimized impl (not eager or compile).")] = None,
    size: SizeOpt = None,
    dtype: DtypeOpt = None,
    section_set: Annotated[
        str | None, typer.Option("--set", help="ncu section set: basic (default), detailed, full, ...")
    ] = None,
    metrics: Annotated[
        str | None, typer.Option(help="Extra ncu metrics, comma-separated, e.g. dram__bytes_read.sum.")
    ] = None,
    op_name: OpOpt = None,
    export: Annotated[Path | None, typer.Option("--export", help="Also keep ncu's report (.ncu-rep) here.")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds before ncu is stopped.")] = 600.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable results to stdout.")] = False,
    solution: SolutionOpt = None,
) -> None:
    """Profile one case with Nsight Compute: the impl's kernels, their throughput, occupancy and ncu's findings.

    The case runs in a fresh process under ncu; warm-up calls (JIT, autotuning) run outside the profiled range.
    Only the kernels of one call are measured, at the clocks they run at (--clock-control none).
    Exit code: 0 when profiled, 1 when ncu gave no profile (no counter access, no kernel), 2 for bad arguments.
    """
    from kernelkit.profiling.ncu import NcuError, ncu_messages, run_ncu
    from kernelkit.report.profile_table import print_kernels

    target = with_solution(target, solution)
    _check_case_args(size, dtype)
    impls = _impls(target, op_name, None)
    if impl is None:
        impl = first_optimized(impls)
        if impl is None:
            raise fail(KernelkitError(f"{target} has no impl but its baselines; name one with --impl"), EXIT_USAGE)
        err.print(f"ncu: profiling {impl}, the op's first optimized impl (--impl NAME for another)", highlight=False)
    elif impl not in impls and impl not in BASELINES:
        raise fail(KernelkitError(f"no impl {impl!r} in {target}; its impls: {', '.join(impls)}"), EXIT_USAGE)
    try:
        report = run_ncu(target, impl, op_name=op_name, size=size, dtype=dtype, section_set=section_set,
                         metrics=[m.strip() for m in (metrics or "").split(",") if m.strip()],
                         timeout=timeout, export=export)
    except KernelkitError as exc:
        raise fail(exc, EXIT_FAILED if isinstance(exc, NcuError) else EXIT_USAGE) from None
    if as_json:
        print(json.dumps(report.to_dict(), indent=2))
        return
    print_kernels(out, f"ncu: {report.case} (--set {report.section_set})", report.kernels, report.metrics)
    for message in ncu_messages(report.output):
        err.print(f"[dim]{escape(message)}[/]", highlight=False)


def asm_command(
    target: TargetArg,
    impl: Annotated[str | None, typer.Option("--impl", "-i", help="The impl whose kernels to show; default: every "
                                                                   "impl whose kernels compile here, in turn.")] = None,
    size: Annotated[str | None, typer.Option(help="One shape, e.g. 1823x781; default: the op's first (GPU).")] = None,
    dtype: DtypeOpt = None,
    ir: Annotated[str | None, typer.Option(help="Print this listing after the summary: ttir, ttgir, llir "
                                                "(Triton), ptx or sass.")] = None,
    arch: Annotated[str | None, typer.Option(help="GPU target, e.g. sm_90; default: this GPU's, else "
                                                  "$KERNELKIT_CUDA_ARCH or sm_90.")] = None,
    config: Annotated[int | None, typer.Option(help="Autotuned Triton kernels: the config to compile, by index "
                                                    "in configs= (default 0).")] = None,
    out_dir: Annotated[Path | None, typer.Option("--out", help="Folder for the listings and cubins; default: "
                                                               "./kernelkit-results/asm.")] = None,
    op_name: OpOpt = None,
    solution: SolutionOpt = None,
) -> None:
    """Show what an impl's kernels compile to: registers, spills, memory, load/store widths; then PTX or SASS.

    Needs no GPU: Triton and CUDA C++ kernels are compiled for --arch here. Every listing is saved to --out.
    Without --impl, every impl whose backend can show its kernels is compiled in turn (the others are listed).
    Exit code: 0 when shown, 1 when a kernel failed to compile, 2 for bad arguments or an impl asm cannot show.
    """
    from kernelkit.profiling.asm import DEFAULT_OUT_DIR, report_for
    from kernelkit.report.profile_table import print_asm_summary

    target = with_solution(target, solution)
    _check_case_args(size, dtype)

    def one(name: str) -> None:
        report = report_for(target, name, ir=ir or "sass", arch=arch, size=size, dtype=dtype, config=config,
                            op_name=op_name)
        paths = report.save(out_dir or DEFAULT_OUT_DIR)
        print_asm_summary(out, report)
        if ir:
            print(report.listing(), flush=True)
        err.print(f"saved {len(paths)} files in {out_dir or DEFAULT_OUT_DIR}", highlight=False)

    if impl is None:
        raise typer.Exit(_each_impl(target, op_name, None, one, "compiled"))
    try:
        one(impl)
    except CompileError as exc:
        raise fail(exc, EXIT_FAILED) from None
    except KernelkitError as exc:
        raise fail(exc, EXIT_USAGE) from None


def first_optimized(impls: dict[str, Impl]) -> str | None:
    """The first impl whose backend is not a baseline's (eager, compile): what ncu looks at without --impl."""
    return next((name for name, impl in impls.items() if impl.backend not in BASELINES), None)


def codegen_command(
    target: TargetArg,
    size: Annotated[str | None, typer.Option(help="One shape, e.g. 1823x781; default: the op's first.")] = None,
    dtype: Annotated[str | None, typer.Option(help="One dtype, e.g. float32; default: the op's first.")] = None,
    device: DeviceOpt = None,
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="Folder for the code; default: ./kernelkit-codegen.")
    ] = None,
    op_name: OpOpt = None,
    compile_mode: CompileModeOpt = None,
) -> None:
    """Print and save the code torch.compile (inductor) generates for the op's reference: C++ on CPU, Triton on GPU.

    The same code TORCH_LOGS=output_code shows, for one case (size x dtype). Saved as <op>_<size>_<dtype>.py.
    Exit code: 0 when saved, 1 when the compile failed, 2 for bad arguments.
    """
    from kernelkit.profiling.codegen import DEFAULT_OUT_DIR, codegen

    try:
        generated = codegen(target, size, dtype, device, mode=compile_mode, op_name=op_name)
        paths = generated.save(out_dir or DEFAULT_OUT_DIR)
    except CompileError as exc:
        raise fail(exc, EXIT_FAILED) from None
    except KernelkitError as exc:
        raise fail(exc, EXIT_USAGE) from None
    print(generated.text)
    err.print(f"saved: {', '.join(str(p) for p in paths)}", highlight=False)
