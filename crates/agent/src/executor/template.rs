//! `seed_template` and the template step of `create`: a template file in its storage, from a URL (verified
//! against its digest) or from PVE's appliance index (`pveam download`), one download per template at a time;
//! a volume the fleet says is already in storage is only looked for.

use super::*;

impl<D: NodeApi> Executor<D> {
    /// `seed_template`: the template is in its storage (downloaded and verified when it was not).
    pub(super) async fn seed(&self, op_id: &str, spec: &TemplateSpec) -> Outcome {
        let (volid, sha256) = self.ensure_template(op_id, spec).await?;
        Ok(OpResult {
            message: "template present".into(),
            container: None,
            template_volid: Some(volid),
            template_sha256: sha256,
            snapshots: None,
        })
    }

    /// Makes sure a template is in its storage; returns the volid to create from and, for a URL
    /// template, the file's sha256.
    pub(super) async fn ensure_template(
        &self,
        op_id: &str,
        spec: &TemplateSpec,
    ) -> Result<(String, Option<String>), OpFailure> {
        let d = &*self.inner.node;
        let volid = spec.volid();
        match &spec.source {
            TemplateSource::Existing => Ok((volid, None)),
            TemplateSource::Volume => {
                if d.has_template(&spec.storage, &spec.file_name).await? {
                    Ok((volid, None))
                } else {
                    Err(OpFailure {
                        error: format!(
                            "template volume {volid} is not on this node: storage {} has no such vztmpl file \
                             (a `volume:` template is used as it is, never downloaded; put the file there or \
                             use `url:`/`pveam:`)",
                            spec.storage
                        ),
                        retryable: false,
                    })
                }
            }
            TemplateSource::Url { url, digest } => {
                let dir = d.template_dir(&spec.storage).await?;
                self.progress(op_id, format!("downloading {url}"));
                let seeded = self
                    .inner
                    .seeder
                    .ensure(&dir, &spec.file_name, url, digest.as_ref())
                    .await?;
                Ok((volid, Some(seeded.sha256)))
            }
            TemplateSource::Appliance => {
                let lock = self
                    .inner
                    .template_locks
                    .lock()
                    .expect("template_locks lock")
                    .entry(volid.clone())
                    .or_default()
                    .clone();
                let _g = lock.lock().await;
                let dir = d.template_dir(&spec.storage).await?;
                let path = dir.join(&spec.file_name);
                if !path.exists() {
                    self.progress(
                        op_id,
                        format!("pveam download {} {}", spec.storage, spec.file_name),
                    );
                    d.pveam_download(&spec.storage, &spec.file_name).await?;
                    // pveam exits 0 even when its task failed: confirm the file is there.
                    if !path.exists() {
                        return Err(OpFailure {
                            error: format!(
                                "pveam download {} {} finished but {} is missing",
                                spec.storage,
                                spec.file_name,
                                path.display()
                            ),
                            retryable: true,
                        });
                    }
                }
                Ok((volid, None))
            }
        }
    }
}
