//! pxctl's command line (clap derive): global connection flags and every subcommand's arguments.
//! `main.rs` parses these and hands them to [`crate::run`]; tests parse with `Cli::try_parse_from`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::config::Overrides;
pub use crate::plan::OutputFormat;

/// pxctl: declarative LXC fleets on Proxmox VE, the client of pxcontroller.
#[derive(Debug, Parser)]
#[command(name = "pxctl", version, about, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// How to reach the controller; each overrides `PXCTL_*` and the config file.
#[derive(Debug, Clone, Default, Args)]
pub struct GlobalArgs {
    /// Config file (default: $PXCTL_CONFIG, else ~/.config/pxctl/config.toml).
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Controller URL, https://HOST:PORT.
    #[arg(long, global = true, value_name = "URL")]
    pub controller: Option<String>,
    /// CA certificate (PEM).
    #[arg(long, global = true, value_name = "PATH")]
    pub ca: Option<PathBuf>,
    /// Client certificate (PEM).
    #[arg(long, global = true, value_name = "PATH")]
    pub cert: Option<PathBuf>,
    /// Client private key (PEM).
    #[arg(long, global = true, value_name = "PATH")]
    pub key: Option<PathBuf>,
    /// Name checked against the controller's certificate (default: the URL's host).
    #[arg(long, global = true, value_name = "NAME")]
    pub server_name: Option<String>,
    /// Never colour the output (also: NO_COLOR set).
    #[arg(long, global = true)]
    pub no_color: bool,
}

impl GlobalArgs {
    pub fn overrides(&self) -> Overrides {
        Overrides {
            config: self.config.clone(),
            controller: self.controller.clone(),
            ca: self.ca.clone(),
            cert: self.cert.clone(),
            key: self.key.clone(),
            server_name: self.server_name.clone(),
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check fleet files locally: syntax, types, ranges, addresses, duplicates, templates.
    ///
    /// Every problem of every file is printed on stderr as FILE:LINE:COLUMN: FIELD: message,
    /// with a hint when there is something useful to say. Exit status: 0 when all files are
    /// valid, 1 when any is invalid or unreadable, 2 on a usage error. Checks that need the
    /// cluster (datastores, bridges, vm_ids in use) happen at `pxctl plan` / `submit`.
    Validate {
        /// Fleet files (fleet.yaml); `file:` SSH keys are read relative to each file.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<String>,
    },
    /// Show what submitting FILE would change: creates, updates, replacements, destroys.
    ///
    /// Secrets show as (sensitive). Exit status: 1 on error; with --detailed-exitcode, 0 when
    /// nothing would change and 2 when something would.
    Plan(PlanArgs),
    /// Apply a fleet file or a saved plan and follow progress until every container is running or failed.
    Submit(SubmitArgs),
    /// List nodes, containers, operations or fleets.
    Get(GetArgs),
    /// Everything about one object.
    #[command(subcommand)]
    Describe(DescribeCommand),
    /// Per-container outputs: vm_id, node, addresses (and passwords with --show-sensitive).
    Output(OutputArgs),
    /// Destroy a whole fleet or some of its containers.
    Destroy(DestroyArgs),
    /// Take a container that exists without pxfleet (made by hand, by Terraform) under management where it is.
    ///
    /// Reads the container's configuration as its node reports it, adds an entry with `adopt: true`
    /// and the container's own values to FILE (under `containers:`; the file is only written when the
    /// controller's plan of the result is valid), then submits FILE like `pxctl submit`: the plan shows
    /// `will be adopted` and asks. vm_id, MACs, addresses and data are kept; nothing is recreated.
    ///
    ///   pxctl adopt fleet.yaml --node pve1 --vm-id 105 --name legacy
    ///
    /// Containers pxfleet can adopt are listed by `pxctl get unmanaged [--node N]`.
    #[command(verbatim_doc_comment)]
    Adopt(AdoptArgs),
    /// Start containers of a fleet (all by default) and keep them running (`state: running`).
    Start(PowerArgs),
    /// Stop containers of a fleet (all by default) and keep them stopped (`state: stopped`).
    Stop(PowerArgs),
    /// Restart containers of a fleet (all by default); they stay running.
    Restart(PowerArgs),
    /// A fleet's revisions: who submitted what, when.
    History(HistoryArgs),
    /// A container's snapshots (`pct snapshot`, `listsnapshot`, `rollback`, `delsnapshot`) on its node.
    ///
    ///   pxctl snapshot create web web1 before-upgrade --description "apt full-upgrade"
    ///   pxctl snapshot list web web1
    ///   pxctl snapshot rollback web web1 before-upgrade
    ///   pxctl snapshot delete web web1 before-upgrade
    ///
    /// Each waits for the operation on the node and prints the container's snapshots after it.
    /// A rollback puts the container back as the snapshot was (disks and configuration; PVE stops
    /// a running container first, pxfleet starts it again): what then differs from the fleet's file
    /// is repaired to the file by the next reconcile pass, like any change made outside pxfleet.
    /// The storage must support snapshots (LVM-thin, ZFS, Ceph RBD, Btrfs, qcow2 on a directory).
    /// Operators of the fleet create, roll back and delete; anyone lists.
    #[command(subcommand, verbatim_doc_comment)]
    Snapshot(SnapshotCommand),
    /// Node enrolment and scheduling.
    #[command(subcommand)]
    Node(NodeCommand),
    /// User certificates: request one (on your machine), issue, list and revoke them (admin).
    ///
    /// How a new user gets access, the key never leaving their machine:
    ///
    ///   the user:   pxctl user request alice      (writes alice.key, mode 0600, and alice.csr)
    ///   an admin:   pxctl user issue alice.csr --role operator --fleets dev
    ///               (writes alice.pem, ca.pem and alice.pxctl.toml next to the CSR)
    ///   the user:   with those three files next to alice.key:
    ///               pxctl --config alice.pxctl.toml get fleets
    ///
    /// Roles: viewer reads; operator also plans, submits and destroys (only the --fleets
    /// listed, all when none); admin does everything, tokens and certificates included.
    /// `pxctl user list` shows every certificate with its serial and expiry;
    /// `pxctl user revoke alice` refuses alice's certificates from her next connection on.
    #[command(subcommand, verbatim_doc_comment)]
    User(UserCommand),
    /// The audit trail (admin): who submitted, destroyed, started or stopped what, who read secrets, made join
    /// tokens, enrolled nodes, cordoned, issued or revoked certificates, and when. Oldest first.
    Audit(AuditArgs),
    /// Host powers an admin grants to a fleet, so its operators may submit them (admin: add, revoke; anyone: list).
    ///
    /// Operators may not give containers powers over their host (PVE reserves these for root@pam):
    /// privileged containers, bind mounts of host paths, device passthrough, the features fuse,
    /// keyctl, mknod, force_rw_sys and mount=FSTYPE, idmap entries mapping into host ids outside 100000-165535, and
    /// existing volumes that belong to no container of the fleet, adopting a container made
    /// outside pxfleet, and hook scripts (run as root on the node). An admin grants them per fleet, as narrowly as the fleet needs:
    ///
    ///   pxctl grant add media bind-mount:/srv/media --reason "library share"
    ///   pxctl grant add vpn device:/dev/net/tun
    ///   pxctl grant add ci feature:fuse feature:mount=nfs
    ///   pxctl grant add legacy privileged
    ///   pxctl grant add files idmap:1000-1000
    ///   pxctl grant add restore volume:local-lvm:vm-900-disk-1
    ///   pxctl grant add legacy adopt:105
    ///
    /// A bind-mount grant covers the path and everything below it (whole path components). A
    /// refused submit names the grant it needs. Admins' own submits need no grant. `revoke` stops
    /// later submits that need it; containers already made keep running as they are.
    /// Grants and revocations are in `pxctl audit`; the plan says which powers each container it
    /// changes runs with, and what allowed them.
    #[command(subcommand, verbatim_doc_comment)]
    Grant(GrantCommand),
    /// Rego policies an admin installs on the controller: evaluated on every submit (and its plan), destroy,
    /// start, stop and restart, whoever asks and whatever the fleet file says (admin: add, remove; anyone: list).
    ///
    /// The input is the one of a fleet's own `policies:` plus the action and the caller:
    ///   input.action      submit | destroy | start | stop | restart (an adopt is a submit whose
    ///                     plan has `adopt` actions)
    ///   input.user        {identity, kind, name, role, fleets}
    ///   input.fleet       the fleet as it would be stored (for a destroy: as it is)
    ///   input.plan        the plan document (docs/plan-json.md)
    ///   input.containers  the containers the action names
    /// Rules named deny / deny_* refuse, warn / warn_* warn (strings, or {"msg", "container"}).
    ///
    ///   pxctl policy add no-prod-destroy no-prod-destroy.rego
    ///   pxctl policy list
    ///   pxctl policy remove no-prod-destroy
    #[command(subcommand, verbatim_doc_comment)]
    Policy(PolicyCommand),
    /// Write a fleet.yaml from another tool's files (on stdout; warnings on stderr).
    #[command(subcommand)]
    Import(ImportCommand),
    /// A backup of the running controller's whole state (admin), in `pxcontroller backup`'s file format: restore
    /// it with `pxcontroller restore --from FILE` (controller stopped; the same seal key). Secrets stay sealed.
    Backup(BackupArgs),
}

#[derive(Debug, Clone, Subcommand)]
pub enum ImportCommand {
    /// From a Terraform environment using the bpg/proxmox provider (its directory: the
    /// `proxmox_virtual_environment_container` resources, local modules, variable defaults).
    ///
    /// Prints the fleet on stdout; what could not be mapped is a comment in it and a warning on
    /// stderr naming FILE:LINE:COL. Exit status: 0 (also with warnings), 1 on error.
    Terraform(ImportTerraformArgs),
}

#[derive(Debug, Clone, Args)]
pub struct ImportTerraformArgs {
    /// The environment's directory (where `terraform plan` runs).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// `terraform state pull` output: existing containers keep their vm_id, node and MAC addresses.
    #[arg(long, value_name = "FILE")]
    pub state: Option<PathBuf>,
    /// The fleet's name (default: the directory's name).
    #[arg(long, value_name = "NAME")]
    pub fleet: Option<String>,
    /// A variables file read after DIR's terraform.tfvars and *.auto.tfvars (as `terraform -var-file`);
    /// may be repeated.
    #[arg(long, value_name = "FILE")]
    pub var_file: Vec<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct BackupArgs {
    /// The file to write (replaced only once the whole backup arrived and its checksum holds).
    #[arg(long)]
    pub out: std::path::PathBuf,
}

#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Make a private key and a certificate request for NAME, here; no controller needed.
    ///
    /// Writes DIR/NAME.key (mode 0600; it never leaves this machine) and DIR/NAME.csr. Send the .csr to an
    /// admin of the controller, who runs `pxctl user issue NAME.csr --role ROLE` and sends back NAME.pem,
    /// ca.pem and NAME.pxctl.toml. Put them in DIR and use `pxctl --config DIR/NAME.pxctl.toml ...`.
    #[command(verbatim_doc_comment)]
    Request(UserRequestArgs),
    /// Admin: sign a certificate request with the controller's CA, for a role (and fleets).
    ///
    /// Writes NAME.pem (the certificate), ca.pem (the controller's CA) and NAME.pxctl.toml (a pxctl config
    /// naming the controller, ca.pem, NAME.pem and NAME.key) into --out-dir (default: the CSR's directory).
    /// Hand those three files to the user. The user name is the CSR's common name unless --name is given.
    #[command(verbatim_doc_comment)]
    Issue(UserIssueArgs),
    /// Admin: every certificate the controller's CA issued, with role, fleets, serial, expiry, revocation.
    List(UserListArgs),
    /// Admin: revoke a user's certificates (by NAME) or one certificate (by SERIAL, users or nodes).
    ///
    /// The controller refuses a revoked certificate at the next connection (TLS alert certificate_revoked).
    Revoke(UserRevokeArgs),
}

#[derive(Debug, Clone, Subcommand)]
pub enum PolicyCommand {
    /// Admin: install (or replace) policy NAME from a .rego FILE; refused unless it compiles.
    Add {
        /// Lower-case letters, digits and '-'; findings name it admin:NAME.
        name: String,
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
    /// The installed policies: name, who installed it, when, checksum.
    List {
        #[arg(short = 'o', long = "output", value_enum, default_value_t = ListFormat::Table)]
        format: ListFormat,
    },
    /// Print the source of policy NAME.
    Show { name: String },
    /// Admin: remove policy NAME.
    Remove { name: String },
}

#[derive(Debug, Clone, Subcommand)]
pub enum GrantCommand {
    /// Admin: grant FLEET one or more host powers (each a grant of its own, with its id).
    Add(GrantAddArgs),
    /// The grants of FLEET (every fleet when none is given).
    List(GrantListArgs),
    /// Admin: take grants back by id (from `pxctl grant list`).
    Revoke(GrantRevokeArgs),
}

#[derive(Debug, Clone, Args)]
pub struct GrantAddArgs {
    pub fleet: String,
    /// privileged, bind-mount:/HOST/PATH, device:/dev/NAME, feature:fuse, feature:keyctl,
    /// feature:mknod, feature:force_rw_sys, feature:mount=FSTYPE, idmap:FIRST-LAST (host ids),
    /// volume:STORAGE:VOLUME, adopt:VMID, hookscript:STORAGE:snippets/FILE.
    #[arg(required = true, value_name = "POWER")]
    pub powers: Vec<String>,
    /// Why (kept with the grant and in the audit trail).
    #[arg(long, default_value = "")]
    pub reason: String,
    #[arg(short = 'o', long = "output", value_enum, default_value_t = ListFormat::Table)]
    pub format: ListFormat,
}

#[derive(Debug, Clone, Args)]
pub struct GrantListArgs {
    pub fleet: Option<String>,
    #[arg(short = 'o', long = "output", value_enum, default_value_t = ListFormat::Table)]
    pub format: ListFormat,
}

#[derive(Debug, Clone, Args)]
pub struct GrantRevokeArgs {
    #[arg(required = true, value_name = "ID")]
    pub ids: Vec<u64>,
}

#[derive(Debug, Clone, Args)]
pub struct UserRequestArgs {
    /// The user name (letters, digits, . _ - @); becomes pxfleet://user/NAME.
    pub name: String,
    /// Where to write NAME.key and NAME.csr.
    #[arg(long, default_value = ".", value_name = "DIR")]
    pub dir: PathBuf,
    /// Replace an existing NAME.key.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum UserRole {
    /// Read only.
    Viewer,
    /// Plan, submit, destroy (only --fleets when given).
    Operator,
    /// Everything.
    Admin,
}

#[derive(Debug, Clone, Args)]
pub struct UserIssueArgs {
    /// The certificate request (NAME.csr from `pxctl user request`).
    #[arg(value_name = "CSR")]
    pub csr: PathBuf,
    #[arg(long, value_enum)]
    pub role: UserRole,
    /// Operator only: the fleets it may change, comma-separated (default: all).
    #[arg(long, value_delimiter = ',', value_name = "FLEET,...")]
    pub fleets: Vec<String>,
    /// Validity in days (default: the controller's, one year).
    #[arg(long, value_name = "N")]
    pub days: Option<u32>,
    /// The user name (default: the CSR's common name).
    #[arg(long)]
    pub name: Option<String>,
    /// Where to write NAME.pem, ca.pem and NAME.pxctl.toml (default: the CSR's directory).
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
    #[arg(short = 'o', long = "output", value_enum, default_value_t = ListFormat::Table)]
    pub format: ListFormat,
}

#[derive(Debug, Clone, Args)]
pub struct UserListArgs {
    /// Include node certificates.
    #[arg(long)]
    pub all: bool,
    #[arg(short = 'o', long = "output", value_enum, default_value_t = ListFormat::Table)]
    pub format: ListFormat,
}

#[derive(Debug, Clone, Args)]
pub struct UserRevokeArgs {
    /// A user name (revokes all of its valid certificates) or a certificate serial (hex).
    #[arg(value_name = "NAME|SERIAL")]
    pub target: String,
    /// Why (kept in the audit trail).
    #[arg(long, default_value = "")]
    pub reason: String,
}

/// Listing renderings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum ListFormat {
    #[default]
    Table,
    Json,
    Yaml,
}

#[derive(Debug, Clone, Args)]
pub struct PlanArgs {
    /// The fleet file (fleet.yaml).
    #[arg(value_name = "FILE")]
    pub file: String,
    /// Plan against an empty world (nothing applied, nothing running) without a controller.
    #[arg(long)]
    pub offline: bool,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t)]
    pub output: OutputFormat,
    /// Exit 0 when there are no changes, 2 when there are, 1 on error.
    #[arg(long)]
    pub detailed_exitcode: bool,
    /// Also save the plan here, for `pxctl submit PLAN.json` (applies exactly it).
    #[arg(long, value_name = "PATH")]
    pub out: Option<PathBuf>,
    /// Plan destroying the whole fleet instead.
    #[arg(long)]
    pub destroy: bool,
}

#[derive(Debug, Clone, Args)]
pub struct SubmitArgs {
    /// A fleet file, or a plan saved with `pxctl plan --out`.
    pub file: PathBuf,
    /// Do not ask for confirmation.
    #[arg(short = 'y', long)]
    pub yes: bool,
    /// Return once the controller accepted the submission, without following progress.
    #[arg(long)]
    pub no_wait: bool,
    /// Give up following progress after this long (e.g. 90s, 30m, 2h).
    #[arg(long, value_parser = parse_duration, default_value = "1h")]
    pub timeout: Duration,
    /// Retry containers whose operations failed for good (also when the file did not change): a new revision
    /// is recorded and their operations start again from the first attempt.
    #[arg(long)]
    pub retry_failed: bool,
}

#[derive(Debug, Clone, Args)]
pub struct AdoptArgs {
    /// The fleet file to add the container to (its `fleet:` is the fleet it joins).
    pub file: PathBuf,
    /// The node the container is on.
    #[arg(long)]
    pub node: String,
    /// Its vm_id.
    #[arg(long)]
    pub vm_id: u32,
    /// Its name in the fleet (default: its hostname).
    #[arg(long)]
    pub name: Option<String>,
    /// Do not ask for confirmation before submitting.
    #[arg(short = 'y', long)]
    pub yes: bool,
    /// Return once the controller accepted the submission, without following progress.
    #[arg(long)]
    pub no_wait: bool,
    /// Give up following progress after this long (e.g. 90s, 30m, 2h).
    #[arg(long, value_parser = parse_duration, default_value = "1h")]
    pub timeout: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GetKind {
    Nodes,
    Containers,
    Operations,
    Fleets,
    /// Containers on the nodes without pxfleet's mark (what `pxctl adopt` can take over).
    Unmanaged,
}

#[derive(Debug, Clone, Args)]
pub struct GetArgs {
    /// What to list.
    #[arg(value_enum)]
    pub kind: GetKind,
    #[arg(short = 'o', long = "output", value_enum, default_value_t = ListFormat::Table)]
    pub format: ListFormat,
    /// Only this fleet (containers, operations).
    #[arg(long)]
    pub fleet: Option<String>,
    /// Only this node (containers, operations).
    #[arg(long)]
    pub node: Option<String>,
    /// Operations: only pending, dispatched and running ones.
    #[arg(long)]
    pub active: bool,
    /// Operations: at most this many (0 = the controller's default).
    #[arg(long, default_value_t = 0)]
    pub limit: u32,
}

#[derive(Debug, Subcommand)]
pub enum DescribeCommand {
    /// A container: desired and observed state, drift, operations.
    Container(DescribeContainerArgs),
}

#[derive(Debug, Clone, Args)]
pub struct DescribeContainerArgs {
    pub name: String,
    /// The container's fleet (needed only when the name exists in several fleets).
    #[arg(long)]
    pub fleet: Option<String>,
    #[arg(short = 'o', long = "output", value_enum, default_value_t = ListFormat::Table)]
    pub format: ListFormat,
}

#[derive(Debug, Clone, Args)]
pub struct OutputArgs {
    /// The fleet (may be left out when only one exists).
    #[arg(long)]
    pub fleet: Option<String>,
    /// Include generated passwords.
    #[arg(long)]
    pub show_sensitive: bool,
    #[arg(short = 'o', long = "output", value_enum, default_value_t = ListFormat::Table)]
    pub format: ListFormat,
}

#[derive(Debug, Clone, Args)]
pub struct DestroyArgs {
    /// The fleet.
    pub fleet: String,
    /// Only these containers (default: all of the fleet).
    pub containers: Vec<String>,
    /// Do not ask for confirmation.
    #[arg(short = 'y', long)]
    pub yes: bool,
    /// Return once the controller accepted, without following progress.
    #[arg(long)]
    pub no_wait: bool,
    /// Give up following progress after this long.
    #[arg(long, value_parser = parse_duration, default_value = "1h")]
    pub timeout: Duration,
}

#[derive(Debug, Subcommand)]
pub enum SnapshotCommand {
    /// Take a snapshot of a container (running or stopped).
    Create {
        #[command(flatten)]
        target: SnapshotTarget,
        /// A letter, then letters, digits, '_' or '-' (2 to 40; not `current` or `vzdump`).
        name: String,
        /// Shown by `snapshot list` (PVE keeps it in the container's configuration).
        #[arg(long, default_value = "")]
        description: String,
    },
    /// The container's snapshots, parents first (oldest first when taken one after the other).
    List {
        #[command(flatten)]
        target: SnapshotTarget,
        #[arg(short = 'o', long = "output", value_enum, default_value_t = ListFormat::Table)]
        format: ListFormat,
    },
    /// Put the container back as snapshot NAME was; what it got since is lost. Asks unless -y.
    Rollback {
        #[command(flatten)]
        target: SnapshotTarget,
        name: String,
        /// Do not ask for confirmation.
        #[arg(short = 'y', long)]
        yes: bool,
    },
    /// Delete snapshot NAME (the container keeps its current state).
    Delete {
        #[command(flatten)]
        target: SnapshotTarget,
        name: String,
    },
}

#[derive(Debug, Clone, Args)]
pub struct SnapshotTarget {
    /// The fleet.
    pub fleet: String,
    /// The container (its name in the fleet).
    pub container: String,
    /// Give up waiting for the operation after this long (it goes on on the node).
    #[arg(long, value_parser = parse_duration, default_value = "30m")]
    pub timeout: Duration,
}

#[derive(Debug, Clone, Args)]
pub struct PowerArgs {
    /// The fleet.
    pub fleet: String,
    /// Only these containers (default: all of the fleet).
    pub containers: Vec<String>,
    /// Return once the controller accepted, without following progress.
    #[arg(long)]
    pub no_wait: bool,
    /// Give up following progress after this long.
    #[arg(long, value_parser = parse_duration, default_value = "1h")]
    pub timeout: Duration,
}

#[derive(Debug, Clone, Args)]
pub struct AuditArgs {
    /// Only what was done to this fleet (submits, destroys, power changes, secret reads).
    #[arg(long)]
    pub fleet: Option<String>,
    /// Only entries since then: a duration back from now (90s, 10m, 2h, 7d) or an RFC 3339 time
    /// (2026-12-03T08:00:00Z).
    #[arg(long, value_parser = parse_since, value_name = "T")]
    pub since: Option<std::time::SystemTime>,
    /// At most this many entries, the newest (0 = the controller's default, 1000).
    #[arg(long, default_value_t = 0)]
    pub limit: u32,
    #[arg(short = 'o', long = "output", value_enum, default_value_t = ListFormat::Table)]
    pub format: ListFormat,
}

/// `--since`: a duration back from now (`2h`) or an RFC 3339 time.
pub fn parse_since(s: &str) -> Result<std::time::SystemTime, String> {
    if let Ok(d) = parse_duration(s) {
        return pxfleet_common::Clock::system()
            .system_time()
            .checked_sub(d)
            .ok_or_else(|| format!("{s:?} reaches back before 1970"));
    }
    let t = time::OffsetDateTime::parse(s.trim(), &time::format_description::well_known::Rfc3339)
        .map_err(|_| {
            format!("{s:?} is neither a duration (90s, 10m, 2h, 7d) nor an RFC 3339 time (2026-12-03T08:00:00Z)")
        })?;
    Ok(std::time::SystemTime::from(t))
}

#[derive(Debug, Clone, Args)]
pub struct HistoryArgs {
    /// The fleet (may be left out when only one exists).
    #[arg(long)]
    pub fleet: Option<String>,
    /// At most this many revisions, newest first (0 = all).
    #[arg(long, default_value_t = 0)]
    pub limit: u32,
    #[arg(short = 'o', long = "output", value_enum, default_value_t = ListFormat::Table)]
    pub format: ListFormat,
}

#[derive(Debug, Subcommand)]
pub enum NodeCommand {
    /// Join tokens for `pxagent join`.
    #[command(subcommand)]
    Token(TokenCommand),
    /// List nodes (same as `get nodes`).
    List {
        #[arg(short = 'o', long = "output", value_enum, default_value_t = ListFormat::Table)]
        format: ListFormat,
    },
    /// Stop scheduling new containers on a node.
    Cordon {
        node: String,
        /// Why (shown in `get nodes`).
        #[arg(long, default_value = "")]
        reason: String,
    },
    /// Resume scheduling on a node.
    Uncordon { node: String },
    /// Cordon a node and migrate every container off it (the scheduler picks the targets), showing progress.
    Drain {
        node: String,
        /// Why (shown in `get nodes`); default "drained".
        #[arg(long, default_value = "")]
        reason: String,
        /// Return once the moves are decided, without following them.
        #[arg(long)]
        no_wait: bool,
        /// Give up following after this long (e.g. 90s, 30m).
        #[arg(long, value_parser = parse_duration, default_value = "1h")]
        timeout: Duration,
    },
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a one-time join token (shown once).
    Create(TokenCreateArgs),
}

#[derive(Debug, Clone, Args)]
pub struct TokenCreateArgs {
    /// Lifetime (e.g. 600, 10m, 1h, 2d).
    #[arg(long, value_parser = parse_duration, default_value = "1h")]
    pub ttl: Duration,
    /// Only this node name may enrol with it.
    #[arg(long)]
    pub node: Option<String>,
    #[arg(short = 'o', long = "output", value_enum, default_value_t = ListFormat::Table)]
    pub format: ListFormat,
}

/// `90`, `90s`, `10m`, `2h`, `1d` (a bare number is seconds): [`pxfleet_common::parse_duration`], as clap takes it.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    pxfleet_common::parse_duration(s).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("pxctl").chain(args.iter().copied())).unwrap()
    }

    #[test]
    fn plan_flags() {
        let cli = parse(&[
            "plan",
            "examples/dev/fleet.yaml",
            "-o",
            "markdown",
            "--out",
            "p.json",
            "--detailed-exitcode",
        ]);
        let Command::Plan(p) = cli.command else {
            panic!("not plan")
        };
        assert_eq!(p.file, "examples/dev/fleet.yaml");
        assert_eq!(p.output, OutputFormat::Markdown);
        assert_eq!(p.out, Some(PathBuf::from("p.json")));
        assert!(p.detailed_exitcode && !p.offline && !p.destroy);
    }

    #[test]
    fn global_flags_go_anywhere() {
        let cli = parse(&[
            "get",
            "containers",
            "-o",
            "json",
            "--controller",
            "https://h:1",
            "--fleet",
            "dev",
        ]);
        assert_eq!(cli.global.controller.as_deref(), Some("https://h:1"));
        let Command::Get(g) = cli.command else {
            panic!("not get")
        };
        assert_eq!((g.kind, g.format), (GetKind::Containers, ListFormat::Json));
        assert_eq!(g.fleet.as_deref(), Some("dev"));
    }

    #[test]
    fn submit_and_destroy() {
        let Command::Submit(s) = parse(&["submit", "f.yaml", "-y"]).command else {
            panic!()
        };
        assert!(s.yes && !s.no_wait);
        assert_eq!(s.timeout, Duration::from_secs(3600));
        let Command::Destroy(d) =
            parse(&["destroy", "dev", "web-1", "web-2", "--timeout", "5m"]).command
        else {
            panic!()
        };
        assert_eq!(d.fleet, "dev");
        assert_eq!(d.containers, ["web-1", "web-2"]);
        assert!(!d.yes);
        assert_eq!(d.timeout, Duration::from_secs(300));
    }

    #[test]
    fn node_commands() {
        let Command::Node(NodeCommand::Token(TokenCommand::Create(t))) =
            parse(&["node", "token", "create", "--ttl", "10m", "--node", "mk33"]).command
        else {
            panic!()
        };
        assert_eq!(t.ttl, Duration::from_secs(600));
        assert_eq!(t.node.as_deref(), Some("mk33"));
        let Command::Node(NodeCommand::Cordon { node, reason }) =
            parse(&["node", "cordon", "mk33", "--reason", "disk swap"]).command
        else {
            panic!()
        };
        assert_eq!((node.as_str(), reason.as_str()), ("mk33", "disk swap"));
    }

    #[test]
    fn user_commands() {
        let Command::User(UserCommand::Issue(i)) = parse(&[
            "user",
            "issue",
            "alice.csr",
            "--role",
            "operator",
            "--fleets",
            "dev,staging",
            "--days",
            "30",
        ])
        .command
        else {
            panic!()
        };
        assert_eq!(i.csr, PathBuf::from("alice.csr"));
        assert_eq!(i.role, UserRole::Operator);
        assert_eq!(i.fleets, ["dev", "staging"]);
        assert_eq!(i.days, Some(30));
        let err = Cli::try_parse_from(["pxctl", "user", "issue", "a.csr", "--role", "root"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("viewer, operator, admin"), "{err}");
        let Command::User(UserCommand::Request(r)) =
            parse(&["user", "request", "alice", "--dir", "/tmp/k"]).command
        else {
            panic!()
        };
        assert_eq!(
            (r.name.as_str(), r.dir.as_path()),
            ("alice", std::path::Path::new("/tmp/k"))
        );
        let Command::User(UserCommand::Revoke(v)) = parse(&["user", "revoke", "4f3a"]).command
        else {
            panic!()
        };
        assert_eq!(v.target, "4f3a");
    }

    #[test]
    fn bad_values_are_refused_with_what_is_right() {
        let err = Cli::try_parse_from(["pxctl", "get", "pods"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("nodes, containers, operations, fleets"),
            "{err}"
        );
        let err = Cli::try_parse_from(["pxctl", "node", "token", "create", "--ttl", "5 weeks"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown unit"), "{err}");
        assert_eq!(
            parse_duration("0"),
            Err("\"0\" must be more than zero and reasonably small".into())
        );
        assert_eq!(parse_duration("2d"), Ok(Duration::from_secs(172800)));
    }
}
