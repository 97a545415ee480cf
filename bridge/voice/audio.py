"""Audio in and out, by FFmpeg's own codecs through PyAV (docs/voice.md "Decoding").

- `decode(data, max_seconds)` — any audio file the owner sent (Ogg/Opus voice notes first) as
  16 kHz mono samples, at most `max_seconds` of them, and its whole length. The decoder runs in
  a child process (`python -m bridge.voice.audio`): a file that crashes FFmpeg ends that child,
  and the owner gets one line; the bridge goes on.
- `encode_opus(wav)` — a WAV (the TTS's) as an Ogg/Opus voice note, and its length.

Both raise AudioError with the line the owner sees.
"""

from __future__ import annotations

import asyncio
import io
import os
import signal
import sys
from dataclasses import dataclass

RATE = 16_000  # what Whisper listens to
OPUS_RATE = 48_000  # what Opus codes at
DECODE_TIMEOUT = 120.0


class AudioError(Exception):
    """Audio that could not be decoded or encoded; the message is the owner's line."""


@dataclass(frozen=True)
class Decoded:
    samples: bytes  # float32 little-endian, mono, RATE per second (at most the limit)
    seconds: float  # the whole note's length

    @property
    def kept_seconds(self) -> float:
        return len(self.samples) / 4 / RATE


def decoder_command(max_seconds: float) -> list[str]:
    return [sys.executable, "-m", "bridge.voice.audio", f"{max_seconds:g}"]


async def decode(
    data: bytes, max_seconds: float, name: str = "the voice note", command: list[str] | None = None
) -> Decoded:
    """`data` decoded in a child process (`command`: the decoder's; tests name another)."""
    code, out, err = await run_child(
        command or decoder_command(max_seconds),
        data,
        DECODE_TIMEOUT,
        f"{name} could not be decoded in {DECODE_TIMEOUT:.0f} s, so it was not transcribed.",
    )
    return decoded_output(code, out, err, name)


async def run_child(command: list[str], data: bytes, timeout: float, too_slow: str) -> tuple[int | None, bytes, bytes]:
    """Run `command` with `data` on its stdin: (exit code, stdout, stderr). Killed, and
    AudioError(`too_slow`), after `timeout` s; killed if the caller is cancelled."""
    process = await asyncio.create_subprocess_exec(
        *command,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(data), timeout)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise AudioError(too_slow) from None
    except asyncio.CancelledError:
        if process.returncode is None:
            process.kill()
        raise
    return process.returncode, out, err


def decoded_output(code: int | None, out: bytes, err: bytes, name: str) -> Decoded:
    """What the decoder child's exit says (pure): the samples, or the owner's line."""
    lines = err.decode("utf-8", "replace").strip().splitlines()
    last = lines[-1] if lines else ""
    if code == 0 and last.startswith("seconds="):
        try:
            return Decoded(out, float(last.split("=", 1)[1]))
        except ValueError:
            pass
    if code == 2:  # the decoder read it and found no audio in it
        reason = last.removeprefix("not audio: ").strip() or "no audio in it"
        return _refused(f"{name} is not audio the decoder can read ({reason}), so it was not transcribed.")
    if code is not None and code < 0:
        try:
            how = signal.Signals(-code).name
        except ValueError:
            how = f"signal {-code}"
        return _refused(f"The audio decoder crashed on {name} ({how}), so it was not transcribed.")
    return _refused(f"The audio decoder failed on {name} (exit code {code}), so it was not transcribed.")


def _refused(line: str) -> Decoded:
    raise AudioError(line)


def _decode_here(data: bytes, max_seconds: float) -> tuple[bytes, float]:
    """In the child: every audio frame resampled to RATE mono float32; (kept samples, seconds)."""
    import av
    import numpy

    kept, total, limit = [], 0, int(max_seconds * RATE)
    with av.open(io.BytesIO(data), mode="r") as container:
        if not container.streams.audio:
            raise ValueError("no audio stream")
        resampler = av.AudioResampler(format="flt", layout="mono", rate=RATE)
        stream = container.streams.audio[0]

        def take(frames) -> None:
            nonlocal total
            for frame in frames:
                samples = frame.to_ndarray().reshape(-1)
                if total < limit:
                    kept.append(samples[: limit - total])
                total += len(samples)

        for frame in container.decode(stream):
            take(resampler.resample(frame))
        take(resampler.resample(None))
    if total == 0:
        raise ValueError("no sound in it")
    return numpy.concatenate(kept).astype("<f4").tobytes(), total / RATE


def _child(argv: list[str]) -> int:
    max_seconds = float(argv[0]) if argv else 300.0
    data = sys.stdin.buffer.read()
    try:
        import av

        try:
            samples, seconds = _decode_here(data, max_seconds)
        except (av.error.FFmpegError, ValueError, IndexError) as exc:
            why = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            print(f"not audio: {why.splitlines()[0][:200].lower()}", file=sys.stderr)
            return 2
    except ImportError as exc:
        print(f"PyAV is missing: {exc}", file=sys.stderr)
        return 3
    sys.stdout.buffer.write(samples)
    sys.stdout.buffer.flush()
    print(f"seconds={seconds:.3f}", file=sys.stderr)
    return 0


def encode_opus(wav: bytes) -> tuple[bytes, int]:
    """A WAV as Ogg/Opus (48 kHz mono, libopus in PyAV's FFmpeg); (the file, its length in ms)."""
    import av

    out = io.BytesIO()
    samples = 0
    try:
        with av.open(io.BytesIO(wav), mode="r") as source, av.open(out, mode="w", format="ogg") as sink:
            stream = sink.add_stream("libopus", rate=OPUS_RATE)
            stream.layout = "mono"
            stream.bit_rate = 32_000
            resampler = av.AudioResampler(format="s16", layout="mono", rate=OPUS_RATE)

            def put(frames) -> None:
                nonlocal samples
                for frame in frames:
                    samples += frame.samples
                    for packet in stream.encode(frame):
                        sink.mux(packet)

            for frame in source.decode(audio=0):
                put(resampler.resample(frame))
            put(resampler.resample(None))
            for packet in stream.encode(None):
                sink.mux(packet)
    except (av.error.FFmpegError, ValueError) as exc:
        raise AudioError(f"the spoken answer could not be encoded ({exc})") from None
    if samples == 0:
        raise AudioError("the spoken answer came out silent")
    return out.getvalue(), round(samples * 1000 / OPUS_RATE)


def pcm_seconds(samples: bytes) -> float:
    return len(samples) / 4 / RATE


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(_child(sys.argv[1:]))
