//! The maintenance modes as more than one HTTP surface reads and switches them (Queen's
//! `/api/v1/system/maintenance` routes and the operator console): a fresh read, and a
//! switch recorded in the database first (docs/availability.md, "Maintenance mode").

use crate::db::system::{Mode, Modes};
use crate::error::ApiResult;
use crate::state::AppState;

/// The modes from the database (fresh, as Queen's GET reads them), or the ones in force
/// here when it cannot be read.
pub async fn fresh_modes(state: &AppState) -> Modes {
    let generation = state.modes.generation();
    let read = async { state.db.conn().await?.system_state().await };
    match read.await {
        // A switch through this broker during the read is newer than what it saw.
        Ok(m) if state.modes.set_read(m, generation) => m,
        _ => state.modes.get(),
    }
}

/// Switches `mode` in the database, then here; leaving push maintenance wakes the
/// spool's replay.
pub async fn switch(state: &AppState, mode: Mode, enabled: bool) -> ApiResult<Modes> {
    let m = state
        .db
        .conn()
        .await?
        .system_state_set(mode, enabled)
        .await?;
    state.modes.set_written(m);
    if matches!(mode, Mode::Push) && !enabled {
        if let Some(s) = &state.spool {
            s.appended.notify_one();
        }
    }
    Ok(m)
}
