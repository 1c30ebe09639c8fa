//! A single-threaded broadcast signal: tasks wait for the next notification. Used on the
//! agent's shard to wake handlers waiting for a sync round or for a local state change.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

#[derive(Default)]
pub struct Signal {
    generation: Cell<u64>,
    wakers: RefCell<Vec<Waker>>,
}

impl Signal {
    /// Wakes every current waiter.
    pub fn notify_all(&self) {
        self.generation.set(self.generation.get() + 1);
        for waker in self.wakers.borrow_mut().drain(..) {
            waker.wake();
        }
    }

    /// Resolves at the next [`Signal::notify_all`] after this call.
    pub fn wait(&self) -> SignalWait<'_> {
        SignalWait {
            signal: self,
            generation: self.generation.get(),
        }
    }
}

pub struct SignalWait<'a> {
    signal: &'a Signal,
    generation: u64,
}

impl Future for SignalWait<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.signal.generation.get() != self.generation {
            return Poll::Ready(());
        }
        let mut wakers = self.signal.wakers.borrow_mut();
        if !wakers.iter().any(|w| w.will_wake(cx.waker())) {
            wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}
