# No privileged containers, even in a fleet that sets `allow_privileged: true`.
package pxfleet.no_privileged

deny_privileged contains {"msg": "privileged containers are not allowed (unprivileged: false)", "container": name} if {
	some name, c in input.fleet.containers
	c.unprivileged == false
}
