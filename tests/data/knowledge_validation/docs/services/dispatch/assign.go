// Package assign decides which robot does which task.
//
// Dispatch runs an assignment round every two seconds per site. A round takes the
// open tasks, the robots that can accept work, and the charge plan, computes the cost
// of every feasible (task, robot) pair, and assigns greedily from the cheapest pair
// upwards. Greedy is not optimal, but a full Hungarian solve over 77 robots and
// several hundred tasks took too long at Columbus to fit in the two-second budget,
// and in fleetsim the difference in picks per hour was under 1%.
package assign

import (
	"errors"
	"sort"
	"time"
)

const (
	// AssignmentLease is how long a robot has to confirm that it started a task.
	// Without confirmation the task goes back to the open pool and the robot gets
	// nothing new until it reports again. 45 seconds covers a robot finishing a
	// motion segment and a Wi-Fi roam between access points.
	AssignmentLease = 45 * time.Second

	// MaxQueuedTasks caps the tasks queued on one robot, including the one it is
	// working on. Longer queues made reassignment expensive when a robot failed,
	// and island mode relies on the queue being short.
	MaxQueuedTasks = 3

	// OfflineReclaimAfter: tasks of a robot that has been offline this long are
	// reclaimed and reassigned, even if their lease has not run out. Shorter than the
	// lease because an offline robot will not confirm anything anyway.
	OfflineReclaimAfter = 30 * time.Second

	// MaxTasksPerRound bounds the work of one round. Tasks beyond it, lowest
	// priority first, wait for the next round.
	MaxTasksPerRound = 500

	// BatteryReservePct is added to a task's estimated consumption when checking
	// whether a robot can take it: the robot must end the task at least this many
	// percentage points above its low threshold.
	BatteryReservePct = 5

	// cutoffUrgencyWindow: tasks whose order must be at the station within this
	// window get their cost halved, so they win against cheaper but less urgent work.
	cutoffUrgencyWindow = 20 * time.Minute
)

// ErrNoRobot is returned when no robot can take a task in this round.
var ErrNoRobot = errors.New("assign: no eligible robot")

// Model is a robot model.
type Model string

const (
	PickerP3 Model = "picker_p3"
	LifterL2 Model = "lifter_l2"
)

// Robot is the view of a robot that assignment needs.
type Robot struct {
	ID          string
	Model       Model
	BatteryPct  int
	LowPct      int // the site's low battery threshold
	Queued      int // tasks already queued, including the current one
	ChargeSoon  bool
	InService   bool
	SecondsFree float64 // estimated seconds until the current queue is done
}

// Task is an open task.
type Task struct {
	ID              string
	NeedsLifter     bool
	Priority        int // higher is more important; express orders are 2, standard 1, replenishment 0
	CutoffAt        time.Time
	EstSeconds      float64
	EstBatteryPct   int
	TravelSecondsTo func(robotID string) float64
}

// Assignment pairs a task with a robot.
type Assignment struct {
	TaskID  string
	RobotID string
	Cost    float64
}

// eligible reports whether r may take t at all.
//
// A robot that charge-planner will send to a dock within five minutes (ChargeSoon)
// only gets tasks estimated at under three minutes. Shelf tasks need a Lifter;
// Lifters never take tote tasks, because their top plate cannot hold totes.
func eligible(r Robot, t Task) bool {
	if !r.InService || r.Queued >= MaxQueuedTasks {
		return false
	}
	if t.NeedsLifter != (r.Model == LifterL2) {
		return false
	}
	if r.ChargeSoon && t.EstSeconds >= 180 {
		return false
	}
	return r.BatteryPct-t.EstBatteryPct >= r.LowPct+BatteryReservePct
}

// cost estimates the seconds until the task's goods reach the station if r does it:
// the robot's remaining queue, the drive to the task's start, and the task itself.
func cost(r Robot, t Task, now time.Time) float64 {
	c := r.SecondsFree + t.TravelSecondsTo(r.ID) + t.EstSeconds
	if !t.CutoffAt.IsZero() && t.CutoffAt.Sub(now) < cutoffUrgencyWindow {
		c /= 2
	}
	return c
}

// Round assigns tasks to robots for one assignment round.
//
// Tasks are considered in priority order and only the first MaxTasksPerRound of
// them. The returned assignments are in the order they were made.
func Round(robots []Robot, tasks []Task, now time.Time) []Assignment {
	sort.SliceStable(tasks, func(i, j int) bool { return tasks[i].Priority > tasks[j].Priority })
	if len(tasks) > MaxTasksPerRound {
		tasks = tasks[:MaxTasksPerRound]
	}

	type pair struct {
		t, r int
		c    float64
	}
	var pairs []pair
	for ti, t := range tasks {
		for ri, r := range robots {
			if eligible(r, t) {
				pairs = append(pairs, pair{ti, ri, cost(r, t, now)})
			}
		}
	}
	sort.Slice(pairs, func(i, j int) bool { return pairs[i].c < pairs[j].c })

	taken := make(map[int]bool)
	var out []Assignment
	for _, p := range pairs {
		if taken[p.t] || robots[p.r].Queued >= MaxQueuedTasks {
			continue
		}
		taken[p.t] = true
		robots[p.r].Queued++
		robots[p.r].SecondsFree += tasks[p.t].EstSeconds
		out = append(out, Assignment{TaskID: tasks[p.t].ID, RobotID: robots[p.r].ID, Cost: p.c})
	}
	return out
}

// Lease is a task's assignment to a robot, waiting for the robot to start it.
type Lease struct {
	TaskID    string
	RobotID   string
	GrantedAt time.Time
	Started   bool
}

// Reclaim returns the tasks that must go back to the open pool at time now.
//
// A lease is reclaimed when the robot has not started the task within
// AssignmentLease, or when the robot has been offline for OfflineReclaimAfter,
// whichever comes first. lastSeen maps robot IDs to the time of their last message.
//
// Reclaimed tasks keep their original creation time, so they do not lose their
// place in the queue to tasks created after them. A task reclaimed three times is
// flagged for an operator instead of being assigned a fourth time: in practice that
// means its source location is unreachable, and assigning it again only moves the
// problem to another robot.
func Reclaim(leases []Lease, lastSeen map[string]time.Time, now time.Time) (reclaimed []string) {
	for _, l := range leases {
		if l.Started {
			continue
		}
		expired := now.Sub(l.GrantedAt) >= AssignmentLease
		seen, ok := lastSeen[l.RobotID]
		offline := !ok || now.Sub(seen) >= OfflineReclaimAfter
		if expired || offline {
			reclaimed = append(reclaimed, l.TaskID)
		}
	}
	return reclaimed
}

// MaxReclaims is how often a task may be reclaimed before an operator must look at it.
const MaxReclaims = 3
