//! How a run ends at its stop, and how it sleeps until then.

use super::*;

#[test]
fn a_stop_ends_a_run_without_cycles() {
    let samples = std::sync::atomic::AtomicU64::new(0);
    let behave = |p: &str, j: &Job| {
        if j.bw {
            samples.fetch_add(1, Ordering::SeqCst);
        }
        good(p, j)
    };
    let fake = Fake::new(&behave);
    let w = world(3, 2);
    let devices = ["fake0".to_owned()];
    let plan = Plan {
        world: &w,
        tors: None,
        config: config(10, 2),
        bw_every: 2,
        cycles: None,
        devices: &devices,
        clocks: &[Ok(RXE)],
    };
    let stop = rdma_app::wake::Stop::new().unwrap();
    let summary = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(150));
            stop.request();
        });
        run(&plan, &fake, &Sinks::default(), &stop, &mut |_| {}).unwrap()
    });
    assert!(!summary.by_cycles);
    assert!(summary.intervals >= 3, "{summary:?}");
    // --bw-every 2: every second probe of a pair asks for a sample (2 peers, each probed
    // once an interval).
    let samples = samples.load(Ordering::SeqCst);
    assert!(summary.probes > 0);
    assert!(
        samples.abs_diff(summary.probes / 2) <= 2,
        "{samples} of {summary:?}"
    );
}

/// The scheduler sleeps between intervals: it wakes for its next interval, a result or a stop,
/// not on a tick (it looked at its stop flag every 50 ms, for as long as the mesh ran).
#[test]
fn an_idle_scheduler_sleeps_until_its_interval_or_a_stop() {
    const THREAD: &str = "mesh-scheduler";
    let fake = Fake::new(&good);
    let w = world(3, 0);
    let devices = ["fake0".to_owned()];
    // An hour's interval, node 0's phase 0 and no jitter: the first probes at once, the next
    // an hour later.
    let mut hour = config(3_600_000, 2);
    hour.jitter = 0.0;
    let plan = Plan {
        world: &w,
        tors: None,
        config: hour,
        bw_every: 0,
        cycles: None,
        devices: &devices,
        clocks: &[Ok(RXE)],
    };
    let stop = rdma_app::wake::Stop::new().unwrap();
    let wait_for = rdma_app::testing::wait_for;
    std::thread::scope(|s| {
        let scheduler = std::thread::Builder::new()
            .name(THREAD.into())
            .spawn_scoped(s, || {
                run(&plan, &fake, &Sinks::default(), &stop, &mut |_| {})
            })
            .unwrap();
        wait_for("the first interval's probes", &|| fake.calls().len() == 2);
        std::thread::sleep(Duration::from_millis(200));
        let before = rdma_app::testing::thread_switches(THREAD).expect("the scheduler's thread");
        std::thread::sleep(Duration::from_secs(1));
        let woke = rdma_app::testing::thread_switches(THREAD).expect("the scheduler") - before;
        assert!(woke <= 2, "an idle scheduler woke {woke} times in a second");
        // The stop ends the hour-long wait at once.
        stop.request();
        wait_for("the run to stop", &|| scheduler.is_finished());
        let summary = scheduler.join().unwrap().unwrap();
        assert!(!summary.by_cycles);
        assert_eq!(summary.intervals, 1, "{summary:?}");
    });
}
