"""Tests of the SSH inventory: a good file parses to hosts in node order; every mistake is a clear
InventoryError naming the file and the host."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusters.backend import BackendConfigError
from clusters.ssh.inventory import (
    InventoryError,
    InventoryHost,
    load_inventory,
    parse_inventory,
    resolve_ipv4,
)

GOOD = """
known_hosts = "/etc/ssh/kh"
connect_timeout = 7
data_dir = "/srv/rmqh/"

[defaults]
user = "deploy"
sudo = true

[[host]]
name = "n2"
address = "10.0.0.12"
port = 2222

[[host]]
name = "n1"
address = "10.0.0.11"
user = "admin"
sudo = false
agent = true
"""


def test_a_good_inventory_parses_into_hosts_in_node_order():
    inv = parse_inventory(GOOD, "inv.toml")
    assert [h.name for h in inv.hosts] == ["n1", "n2"]
    assert inv.hosts[0] == InventoryHost("n1", "10.0.0.11", 22, "admin", None, False)
    assert inv.hosts[1] == InventoryHost("n2", "10.0.0.12", 2222, "deploy", None, True)
    assert (inv.known_hosts, inv.connect_timeout, inv.data_dir) == ("/etc/ssh/kh", 7.0,
                                                                    "/srv/rmqh")
    assert inv.first(1) == inv.hosts[:1]
    with pytest.raises(InventoryError, match="3-node cluster needs 3 hosts.*has 2"):
        inv.first(3)


def test_names_default_to_position_and_key_files_are_expanded(tmp_path):
    key = tmp_path / "id"
    key.write_text("k")
    inv = parse_inventory(f'[defaults]\nkey_file = "{key}"\n[[host]]\naddress = "h1.example"\n'
                          '[[host]]\naddress = "10.1.1.2"\n', "i")
    assert [(h.name, h.address, h.key_file) for h in inv.hosts] == [
        ("n1", "h1.example", str(key)), ("n2", "10.1.1.2", str(key))]


@pytest.mark.parametrize("text,match", [
    ("[[host", "not valid TOML"),
    ("", "no hosts"),
    ("hosts = 1\n[[host]]\naddress='10.0.0.1'", "unknown key.*hosts"),
    ("[[host]]\naddres = '10.0.0.1'", r"host #1: unknown key\(s\) addres"),
    ("[[host]]\nport = 22", "host #1: no address"),
    ("[[host]]\naddress = 'bad address!'", r"host #1 \(bad address!\): invalid address"),
    ("[[host]]\naddress = '10.0.0.1'\nport = 70000", r"10.0.0.1\): invalid port 70000"),
    ("[[host]]\naddress = '10.0.0.1'\nport = '22'", "invalid port"),
    ("[[host]]\naddress = '10.0.0.1'\nuser = 'a b'", "invalid user"),
    ("[[host]]\naddress = '10.0.0.1'\nsudo = 'yes'", "true or false"),
    ("[[host]]\naddress = '10.0.0.1'\nname = 'rabbit1'", "node name 'rabbit1' must be n1"),
    ("[[host]]\naddress = '10.0.0.1'\nname = 'n2'", "node names must be n1..n1"),
    ("[[host]]\naddress='10.0.0.1'\n[[host]]\naddress='10.0.0.2'\nname='n1'",
     "node n1 is both 10.0.0.1 and 10.0.0.2"),
    ("[[host]]\naddress = '10.0.0.1'\nkey_file = '/no/such/key'",
     "key file /no/such/key does not exist"),
    ("[[host]]\naddress = '10.0.0.1'\nkey_file = '/etc/hostname'\nagent = true",
     "key_file or agent = true, not both"),
    ("[defaults]\naddress = '10.0.0.1'\n[[host]]\naddress = '10.0.0.1'",
     r"\[defaults\] takes only"),
    ("data_dir = 'relative'\n[[host]]\naddress = '10.0.0.1'", "data_dir must be an absolute"),
    ("connect_timeout = 0\n[[host]]\naddress = '10.0.0.1'", "connect_timeout must be > 0"),
])
def test_a_bad_inventory_is_a_clear_error(text, match):
    with pytest.raises(InventoryError, match=match) as e:
        parse_inventory(text, "bad.toml")
    assert "inventory bad.toml" in str(e.value)
    assert isinstance(e.value, BackendConfigError) and isinstance(e.value, ValueError)


def test_missing_and_unreadable_files(tmp_path: Path):
    with pytest.raises(InventoryError, match="no such file"):
        load_inventory(tmp_path / "nope.toml")
    (tmp_path / "bin.toml").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(InventoryError, match="cannot read it"):
        load_inventory(tmp_path / "bin.toml")


def test_addresses_resolve_to_ipv4_or_name_the_host():
    assert resolve_ipv4(InventoryHost("n1", "10.0.0.1")) == "10.0.0.1"
    assert resolve_ipv4(InventoryHost("n1", "localhost")).startswith("127.")
    with pytest.raises(InventoryError, match=r"n2 \(no-such-host.invalid\): .*does not resolve"):
        resolve_ipv4(InventoryHost("n2", "no-such-host.invalid"))
