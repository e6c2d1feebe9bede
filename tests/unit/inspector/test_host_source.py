"""The host source against a /proc with known numbers."""

from __future__ import annotations

from pathlib import Path

from inspector.sources import HostSource, redact


def fake_proc(root: Path, *, user: int, system: int, idle: int, sectors: int, rx: int, tx: int) -> None:
    (root / "net").mkdir(parents=True, exist_ok=True)
    (root / "stat").write_text(f"cpu  {user} 0 {system} {idle} 0 0 0 0 0 0\ncpu0 0 0 0 0 0 0 0 0\n")
    (root / "meminfo").write_text("MemTotal:       1000 kB\nMemAvailable:    400 kB\n")
    (root / "diskstats").write_text(
        f"   8       0 sda 1 0 2 0 3 0 {sectors} 0 0 0 0\n   8       1 sda1 1 0 2 0 3 0 999999 0 0 0 0\n"
        "   7       0 loop0 1 0 2 0 3 0 888888 0 0 0 0\n"
    )
    (root / "net" / "dev").write_text(
        "Inter-|   Receive\n face |bytes\n"
        f"    lo: 5000 0 0 0 0 0 0 0 5000 0 0 0 0 0 0 0\n"
        f"  eth0: {rx} 0 0 0 0 0 0 0 {tx} 0 0 0 0 0 0 0\n"
    )


def test_deltas_between_two_samples(tmp_path: Path) -> None:
    fake_proc(tmp_path, user=100, system=50, idle=850, sectors=1000, rx=10_000, tx=20_000)
    source = HostSource(proc=str(tmp_path))
    assert source.sample() == {}
    # 200 more jiffies: 50 user, 30 system, 120 idle; 8 sectors (4096 bytes) written; 1000/3000 bytes.
    fake_proc(tmp_path, user=150, system=80, idle=970, sectors=1008, rx=11_000, tx=23_000)
    (row,) = source.sample()["host"]
    assert (row["cpu_user_percent"], row["cpu_system_percent"]) == (25.0, 15.0)
    assert (row["memory_total"], row["memory_available"]) == (1_024_000, 409_600)
    assert (row["disk_written_bytes"], row["net_rx_bytes"], row["net_tx_bytes"]) == (4096, 1000, 3000)


def test_credentials_are_redacted() -> None:
    assert redact("http://guest:guest@127.0.0.1:15672/api") == "http://***@127.0.0.1:15672/api"
    assert redact("http://127.0.0.1:15672") == "http://127.0.0.1:15672"
