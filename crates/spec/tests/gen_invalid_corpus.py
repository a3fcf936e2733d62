# Run with python3 from anywhere. Generates crates/spec/tests/invalid/*.yaml. '#<' marks the line the error must name; it is
# removed and its line number written into the '# expect:' header.
import os
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'invalid')
HEAD = """fleet: t
templates:
  deb: {pveam: debian-12-standard_12.7-1_amd64.tar.zst}
containers:
"""
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAII/tPVpCESUKZXQ0ZlJvcxfIUAgEGPXvlUgtWiKvukcx ci@example"
def c(body, name="web-1"):
    lines = "\n".join("    " + l for l in body.strip("\n").split("\n"))
    return HEAD + f"  {name}:\n    template: deb\n" + lines + "\n"
cases = [
 ("unknown-field-typo", "containers.web-1.memroy", c("memroy: 512 #<"), "did you mean 'memory'"),
 ("memory-too-small", "containers.web-1.memory", c("memory: 8 #<"), "at least 16"),
 ("memory-not-a-number", "containers.web-1.memory", c("memory: lots #<"), "must be an integer"),
 ("memory-quoted", "containers.web-1.memory", c("memory: \"512\" #<"), "must be an integer"),
 ("cores-zero", "containers.web-1.cores", c("cores: 0 #<"), "at least 1"),
 ("cores-too-many", "containers.web-1.cores", c("cores: 9000 #<"), "at most 8192"),
 ("vm-id-too-small", "containers.web-1.vm_id", c("vm_id: 99 #<"), "at least 100"),
 ("vm-id-too-large", "containers.web-1.vm_id", c("vm_id: 1000000000 #<"), "at most 999999999"),
 ("swap-negative", "containers.web-1.swap", c("swap: -1 #<"), "at least 0"),
 ("disk-size-zero", "containers.web-1.disk_size", c("disk_size: 0 #<"), "at least 1"),
 ("disk-size-float", "containers.web-1.disk_size", c("disk_size: 1.5 #<"), "must be an integer"),
 ("vlan-zero", "containers.web-1.vlan_id", c("vlan_id: 0 #<"), "at least 1"),
 ("vlan-too-large", "containers.web-1.vlan_id", c("vlan_id: 4095 #<"), "at most 4094"),
 ("mtu-too-small", "containers.web-1.mtu", c("mtu: 500 #<"), "at least 576"),
 ("mtu-too-large", "containers.web-1.mtu", c("mtu: 70000 #<"), "at most 65520"),
 ("startup-order-negative", "containers.web-1.startup.order", c("startup:\n  order: -1 #<"), "at least 0"),
 ("startup-unknown", "containers.web-1.startup.up", c("startup:\n  up: 5 #<"), "unknown field 'up'"),
 ("cpu-limit-too-large", "containers.web-1.cpu_limit", c("cpu_limit: 9000 #<"), "between 0 and 8192"),
 ("cpu-units-too-large", "containers.web-1.cpu_units", c("cpu_units: 600000 #<"), "at most 500000"),
 ("tag-syntax", "containers.web-1.tags.1", c("tags: [web, -bad] #<"), "tag syntax"),
 ("tag-space", "containers.web-1.tags.0", c("tags:\n  - \"two words\" #<"), "tag syntax"),
 ("tags-not-list", "containers.web-1.tags", c("tags: web #<"), "must be a list"),
 ("hostname-underscore", "containers.web-1.hostname", c("hostname: web_1 #<"), "RFC 1123"),
 ("hostname-too-long", "containers.web-1.hostname", c("hostname: " + "a"*64 + " #<"), "RFC 1123"),
 ("hostname-fqdn", "containers.web-1.hostname", c("hostname: web.example.org #<"), "RFC 1123"),
 ("container-key-invalid", "containers.web_1", HEAD + "  web_1: #<\n    template: deb\n", "not a valid host name"),
 ("fleet-name-upper", "fleet", "fleet: Dev #<\ncontainers: {}\n", "fleet name"),
 ("fleet-missing", "fleet", "containers: {} #<\n", "missing field 'fleet'"),
 ("containers-missing", "containers", "fleet: t #<\n", "missing field 'containers'"),
 ("ip-octet", "containers.web-1.ip_address", c("ip_address: 192.168.7.300/24 #<\ngateway: 192.168.7.1"), "not valid"),
 ("ip-no-prefix", "containers.web-1.ip_address", c("ip_address: 192.168.7.10 #<\ngateway: 192.168.7.1"), "not valid"),
 ("ip-network-address", "containers.web-1.ip_address", c("ip_address: 192.168.7.0/24 #<\ngateway: 192.168.7.1"), "network address"),
 ("static-without-gateway", "containers.web-1.ip_address", c("ip_address: 192.168.7.10/24 #<"), "needs a gateway"),
 ("gateway-outside-subnet", "containers.web-1.gateway", c("ip_address: 192.168.7.10/24\ngateway: 192.168.8.1 #<"), "outside the subnet"),
 ("gateway-with-dhcp", "containers.web-1.gateway", c("ip_address: dhcp\ngateway: 192.168.7.1 #<"), "DHCP provides"),
 ("gateway-default-dhcp", "containers.web-1.gateway", c("gateway: 192.168.7.1 #<"), "DHCP provides"),
 ("gateway-is-self", "containers.web-1.gateway", c("ip_address: 192.168.7.10/24\ngateway: 192.168.7.10 #<"), "own address"),
 ("gateway-not-ip", "containers.web-1.gateway", c("ip_address: 192.168.7.10/24\ngateway: router #<"), "not an IPv4 address"),
 ("ipv6-invalid", "containers.web-1.ipv6", c("ipv6: slaac #<"), "not valid"),
 ("gateway6-with-auto", "containers.web-1.gateway6", c("ipv6: auto\ngateway6: 2001:db8::1 #<"), "gateway6 with"),
 ("gateway6-outside", "containers.web-1.gateway6", c("ipv6: 2001:db8::10/64\ngateway6: 2001:db9::1 #<"), "outside the subnet"),
 ("mac-invalid", "containers.web-1.mac_address", c("mac_address: BC:24:11:2A:3B #<"), "not a MAC address"),
 ("mac-multicast", "containers.web-1.mac_address", c("mac_address: 01:00:5E:00:00:01 #<"), "multicast"),
 ("dup-vm-id", "containers.web-2.vm_id", HEAD + "  web-1: {template: deb, vm_id: 200}\n  web-2: {template: deb, vm_id: 200} #<\n", "vm_id 200 is also used by containers.web-1"),
 ("dup-hostname", "containers.web-2.hostname", HEAD + "  web-1: {template: deb}\n  web-2: {template: deb, hostname: web-1} #<\n", "hostname web-1 is also used"),
 ("dup-hostname-case", "containers.web-2.hostname", HEAD + "  web-1: {template: deb, hostname: app}\n  web-2: {template: deb, hostname: APP} #<\n", "is also used"),
 ("dup-address", "containers.web-2.ip_address", HEAD + "  web-1: {template: deb, ip_address: 10.0.0.5/24, gateway: 10.0.0.1}\n  web-2: {template: deb, ip_address: 10.0.0.5/24, gateway: 10.0.0.1} #<\n", "address 10.0.0.5 is also used"),
 ("dup-address-extra", "containers.web-2.extra_interfaces.0.ip_address", HEAD + "  web-1: {template: deb, ip_address: 10.0.0.5/24, gateway: 10.0.0.1}\n  web-2:\n    template: deb\n    extra_interfaces:\n      - {bridge: vmbr1, ip_address: 10.0.0.5/24} #<\n", "also used"),
 ("dup-ipv6", "containers.web-2.ipv6", HEAD + "  web-1: {template: deb, ipv6: 2001:db8::5/64}\n  web-2: {template: deb, ipv6: 2001:db8::5/64} #<\n", "also used"),
 ("dup-mac", "containers.web-2.mac_address", HEAD + "  web-1: {template: deb, mac_address: BC:24:11:00:00:01}\n  web-2: {template: deb, mac_address: bc:24:11:00:00:01} #<\n", "mac_address BC:24:11:00:00:01 is also used"),
 ("template-undeclared", "containers.web-1.template", HEAD + "  web-1:\n    template: debb #<\n", "did you mean 'deb'"),
 ("template-missing", "containers.web-1", HEAD + "  web-1: #<\n    memory: 512\n", "no template"),
 ("template-and-url", "containers.web-1.template_url", c("template_url: https://h/x/a.tar.xz #<"), "not both"),
 ("template-url-ftp", "containers.web-1.template_url", HEAD + "  web-1:\n    template_url: ftp://h/a.tar.xz #<\n", "http:// or https://"),
 ("template-url-not-tarball", "containers.web-1.template_url", HEAD + "  web-1:\n    template_url: https://h/a.iso #<\n", "not a usable template URL"),
 ("privileged-not-allowed", "containers.web-1.unprivileged", c("unprivileged: false #<"), "allow_privileged"),
 ("keyctl-privileged", "containers.web-1.features.keyctl", "allow_privileged: true\n" + c("unprivileged: false\nfeatures: {keyctl: true} #<"), "unprivileged containers only"),
 ("features-typo", "containers.web-1.features.nestng", c("features:\n  nestng: true #<"), "did you mean 'nesting'"),
 ("features-not-bool", "containers.web-1.features.nesting", c("features: {nesting: yes} #<"), "true or false"),
 ("ssh-key-garbage", "containers.web-1.ssh_public_keys.0", c("ssh_public_keys: [\"not a key\"] #<"), "not a valid SSH public key"),
 ("ssh-key-bad-base64", "containers.web-1.ssh_public_keys.0", c("ssh_public_keys:\n  - ssh-ed25519 AAAA!!!! x #<"), "not a valid SSH public key"),
 ("ssh-key-type-mismatch", "containers.web-1.ssh_public_keys.0", c("ssh_public_keys:\n  - " + KEY.replace("ssh-ed25519", "ssh-rsa") + " #<"), "not a valid SSH public key"),
 ("ssh-key-file-missing", "containers.web-1.ssh_public_keys.0", c("ssh_public_keys: [\"file:keys/nope.pub\"] #<"), "cannot read SSH key file"),
 ("ssh-key-private", "containers.web-1.ssh_public_keys.0", c("ssh_public_keys: [\"-----BEGIN OPENSSH PRIVATE KEY-----\"] #<"), "not a valid SSH public key"),
 ("template-url-no-checksum", "templates.u", "fleet: t\ntemplates:\n  u: #<\n    url: https://h/x/a.tar.xz\ncontainers: {}\n", "needs a checksum"),
 ("sha256-short", "templates.u.sha256", "fleet: t\ntemplates:\n  u:\n    url: https://h/x/a.tar.xz\n    sha256: abc123 #<\ncontainers: {}\n", "64 hex digits"),
 ("sha512-not-hex", "templates.u.sha512", "fleet: t\ntemplates:\n  u:\n    url: https://h/x/a.tar.xz\n    sha512: " + "g"*128 + " #<\ncontainers: {}\n", "non-hex"),
 ("template-url-and-pveam", "templates.u", "fleet: t\ntemplates:\n  u: #<\n    url: https://h/x/a.tar.xz\n    sha256: " + "a"*64 + "\n    pveam: debian-12-standard_12.7-1_amd64.tar.zst\ncontainers: {}\n", "not both"),
 ("template-two-checksums", "templates.u.sha512", "fleet: t\ntemplates:\n  u:\n    url: https://h/x/a.tar.xz\n    sha256: " + "a"*64 + "\n    sha512: " + "b"*128 + " #<\ncontainers: {}\n", "not both"),
 ("template-pveam-extension", "templates.u.pveam", "fleet: t\ntemplates:\n  u:\n    pveam: debian-12.iso #<\ncontainers: {}\n", "not a template file name"),
 ("template-storage-invalid", "templates.u.storage", "fleet: t\ntemplates:\n  u:\n    pveam: debian-12-standard_12.7-1_amd64.tar.zst\n    storage: 1local #<\ncontainers: {}\n", "storage id"),
 ("template-unknown-field", "templates.u.checksum", "fleet: t\ntemplates:\n  u:\n    url: https://h/x/a.tar.xz\n    checksum: abc #<\ncontainers: {}\n", "unknown field 'checksum'"),
 ("template-decl-url-ftp", "templates.u.url", "fleet: t\ntemplates:\n  u:\n    url: ftp://h/x/a.tar.xz #<\n    sha256: " + "a"*64 + "\ncontainers: {}\n", "http:// or https://"),
 ("dup-key-in-container", "", c("memory: 512\nmemory: 1024 #<"), "duplicate key 'memory'"),
 ("dup-container", "", HEAD + "  web-1: {template: deb}\n  web-1: {template: deb} #<\n", "duplicate key 'web-1'"),
 ("yaml-syntax", "", "fleet: t\ncontainers:\n  web-1: {template: deb, memory: [1, 2} #<\n", "YAML syntax error"),
 ("yaml-bad-indent", "", "fleet: t\ncontainers:\n  web-1:\n    template: deb\n   memory: 5 #<\n", "YAML syntax error"),
 ("not-a-mapping", "", "- fleet: t #<\n", "must be a mapping"),
 ("two-documents", "", "fleet: t\ncontainers: {}\n--- #<\nfleet: u\n", "one YAML document"),
 ("empty-file", "", "#<\n", "empty"),
 ("lxc-configs", "lxc_configs", "fleet: t\nlxc_configs: {} #<\ncontainers: {}\n", "did you mean 'containers'"),
 ("top-level-typo", "templatse", "fleet: t\ntemplatse: {} #<\ncontainers: {}\n", "did you mean 'templates'"),
 ("allow-privileged-string", "allow_privileged", "fleet: t\nallow_privileged: \"true\" #<\ncontainers: {}\n", "true or false"),
 ("defaults-vm-id", "defaults.vm_id", "fleet: t\ndefaults:\n  vm_id: 100 #<\ncontainers: {}\n", "cannot be set in defaults"),
 ("defaults-memory", "defaults.memory", "fleet: t\ndefaults:\n  memory: 4 #<\ncontainers: {}\n", "at least 16"),
 ("defaults-typo", "defaults.datastore", "fleet: t\ndefaults:\n  datastore: local-zfs #<\ncontainers: {}\n", "did you mean 'datastore_id'"),
 ("defaults-template-undeclared", "defaults.template", "fleet: t\ndefaults:\n  template: nope #<\ncontainers:\n  web-1: {}\n", "not declared"),
 ("dns-server-invalid", "containers.web-1.dns.servers.0", c("dns:\n  servers: [8.8.8] #<"), "not an IP address"),
 ("dns-domain-invalid", "containers.web-1.dns.domain", c("dns:\n  domain: bad_domain #<"), "not a DNS name"),
 ("dns-typo", "containers.web-1.dns.server", c("dns:\n  server: [1.1.1.1] #<"), "did you mean 'servers'"),
 ("password-short", "containers.web-1.password", c("password: abc #<"), "at least 5 characters"),
 ("mount-relative-path", "containers.web-1.mount_points.0.path", c("mount_points:\n  - {datastore_id: local-zfs, size: 5, path: data} #<"), "absolute path"),
 ("mount-missing-size", "containers.web-1.mount_points.0", c("mount_points:\n  - {datastore_id: local-zfs, path: /data} #<"), "needs `datastore_id` and `size`"),
 ("mount-dup-path", "containers.web-1.mount_points.1.path", c("mount_points:\n  - {datastore_id: local-zfs, size: 5, path: /data}\n  - {host_path: /srv/x, path: /data} #<"), "already used"),
 ("mount-bind-backup", "containers.web-1.mount_points.0", c("mount_points:\n  - {host_path: /srv/x, path: /data, backup: true} #<"), "applies to volumes"),
 ("mount-root", "containers.web-1.mount_points.0.path", c("mount_points:\n  - {datastore_id: local-zfs, size: 5, path: /} #<"), "root file system"),
 ("extra-iface-typo", "containers.web-1.extra_interfaces.0.brige", c("extra_interfaces:\n  - brige: vmbr1 #<"), "did you mean 'bridge'"),
 ("extra-iface-scalar", "containers.web-1.extra_interfaces.0", c("extra_interfaces:\n  - vmbr1 #<"), "must be a mapping"),
 ("extra-iface-gateway-outside", "containers.web-1.extra_interfaces.0.gateway", c("extra_interfaces:\n  - bridge: vmbr1\n    ip_address: 10.1.0.5/24\n    gateway: 10.2.0.1 #<"), "outside the subnet"),
 ("extra-iface-dup-name", "containers.web-1.extra_interfaces.0.name", c("extra_interfaces:\n  - {name: eth0, bridge: vmbr1} #<"), "used twice"),
 ("start-on-boot-yes", "containers.web-1.start_on_boot", c("start_on_boot: yes #<"), "true or false"),
 ("labels-nested", "containers.web-1.labels.role", c("labels:\n  role: {a: b} #<"), "must be a string"),
 ("constraints-typo", "containers.web-1.constraints.node", c("constraints:\n  node: [mk33] #<"), "did you mean 'nodes'"),
 ("datastore-invalid", "containers.web-1.datastore_id", c("datastore_id: \"local zfs\" #<"), "storage id"),
 ("bridge-too-long", "containers.web-1.bridge", c("bridge: vmbr0123456789abc #<"), "not a bridge name"),
 ("rate-limit-negative", "containers.web-1.rate_limit", c("rate_limit: -5 #<"), "between 0"),
 ("node-invalid", "containers.web-1.node", c("node: mk_33 #<"), "not a PVE node name"),
 ("container-not-mapping", "containers.web-1", HEAD + "  web-1: [a, b] #<\n", "must be a mapping"),
 ("alias-ram", "containers.web-1.ram", c("ram: 512 #<"), "did you mean 'memory'"),
 ("alias-nesting", "containers.web-1.nesting", c("nesting: true #<"), "features: {nesting: true}"),
 ("alias-cpu", "containers.web-1.cpu", c("cpu: 2 #<"), "did you mean 'cores'"),
 ("firewall-number", "containers.web-1.firewall", c("firewall: 1 #<"), "true or false"),
]
os.makedirs(OUT, exist_ok=True)
names = set()
for name, path, body, sub in cases:
    assert name not in names, name
    names.add(name)
    lines = body.split("\n")
    idx = [i for i, l in enumerate(lines) if "#<" in l]
    assert len(idx) == 1, name
    line = idx[0] + 2  # +1 for 1-based, +1 for the header line
    if name == "empty-file":
        line = 1  # an empty document is reported at 1:1
    lines[idx[0]] = lines[idx[0]].replace(" #<", "").replace("#<", "")
    header = f"# expect: {path or '-'} @ {line} ~ {sub}\n"
    open(os.path.join(OUT, name + ".yaml"), "w").write(header + "\n".join(lines))
print(len(cases))
