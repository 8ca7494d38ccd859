"""Reading Speech Commands clips and their MFCCs (KWT's front end), with librosa.

The features follow KWT-1's released configuration (ARM-software/keyword-transformer,
`models_data_v2_12_labels/kwt1/flags.txt`): 16 kHz clips of 1 s (shorter ones zero-padded at
the end, longer ones cut), 30 ms Hann windows every 10 ms without centring, so 98 frames;
80 mel bands from 20 Hz to 7,600 Hz; 40 DCT coefficients. The DSP is librosa's
(`librosa.feature.mfcc`: power mel spectrogram in dB, orthonormal DCT-II); KWT's TF front end
takes the natural log of the magnitude instead, which differs by a scale factor per bin.
"""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np

from powertrip.core.workloads.base import DataError

SAMPLE_RATE = 16_000
CLIP_SAMPLES = 16_000  # 1 s
WINDOW_SAMPLES = 480  # 30 ms
HOP_SAMPLES = 160  # 10 ms
NUM_MEL = 80
NUM_MFCC = 40
FMIN, FMAX = 20.0, 7600.0
NUM_FRAMES = 1 + (CLIP_SAMPLES - WINDOW_SAMPLES) // HOP_SAMPLES  # 98
FEATURE_VERSION = "librosa-mfcc40-mel80-20-7600-win480-hop160-nocenter-v1"


def read_wav(path: str | Path, how_to_get: str = "") -> np.ndarray:
    """Samples of a 16 kHz mono 16-bit PCM WAV as float32 in [-1, 1).

    Anything else (wrong rate or channels, not PCM, truncated data, not a WAV) raises
    DataError naming the file.
    """
    path = Path(path)
    hint = f" {how_to_get}" if how_to_get else ""
    try:
        with wave.open(str(path), "rb") as wav:
            channels, width = wav.getnchannels(), wav.getsampwidth()
            rate, frames = wav.getframerate(), wav.getnframes()
            if rate != SAMPLE_RATE:
                raise DataError(f"{path}: sample rate {rate} Hz, expected {SAMPLE_RATE}.{hint}")
            if channels != 1:
                raise DataError(f"{path}: {channels} channels, expected mono.{hint}")
            if width != 2:
                raise DataError(f"{path}: {8 * width}-bit samples, expected 16-bit PCM.{hint}")
            data = wav.readframes(frames)
    except FileNotFoundError:
        raise DataError(f"{path}: file not found.{hint}") from None
    except (wave.Error, EOFError, OSError) as exc:
        raise DataError(f"{path}: not a readable PCM WAV file ({exc}).{hint}") from exc
    if frames == 0:
        raise DataError(f"{path}: no audio samples.{hint}")
    if len(data) != frames * 2:
        raise DataError(
            f"{path}: truncated: header promises {frames} samples, file holds "
            f"{len(data) // 2}.{hint}"
        )
    return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0


def fit_clip(samples: np.ndarray) -> np.ndarray:
    """Zero-pad at the end (or cut) to exactly one second."""
    if len(samples) >= CLIP_SAMPLES:
        return np.ascontiguousarray(samples[:CLIP_SAMPLES], dtype=np.float32)
    out = np.zeros(CLIP_SAMPLES, dtype=np.float32)
    out[: len(samples)] = samples
    return out


def mfcc(samples: np.ndarray) -> np.ndarray:
    """(40, 98) float32 MFCCs of a clip, padded or cut to 1 s first."""
    try:
        import librosa  # the `speech` extra: only this workload needs it
    except ImportError:
        raise DataError(
            "speech: computing MFCCs needs librosa: pip install 'powertrip[speech]'"
        ) from None

    clip = fit_clip(np.asarray(samples, dtype=np.float32))
    features = librosa.feature.mfcc(
        y=clip,
        sr=SAMPLE_RATE,
        n_mfcc=NUM_MFCC,
        n_fft=WINDOW_SAMPLES,
        hop_length=HOP_SAMPLES,
        win_length=WINDOW_SAMPLES,
        window="hann",
        center=False,
        n_mels=NUM_MEL,
        fmin=FMIN,
        fmax=FMAX,
    )
    return features.astype(np.float32)
